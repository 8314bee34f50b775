"""Sizing a planned MySQL/MariaDB configuration (`hpadvise size mysql NAME=VALUE ...`).

The server binary installed here parses the settings itself: `mariadbd --no-defaults
--verbose --help --NAME=VALUE ...` rejects unknown names and malformed values and prints every
option's final value (sizes resolved, defaults filled in) without starting. Those values go
through the same allocation model `check` uses for a running server (sizing.py); allocations
the model computes from a formula (key cache, Aria page cache) make the count an estimate, as
they do for a stopped server.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from hpadvise.api.face import Demand, HostFacts, InputError, Instance

from .conf import OptionFileError, norm
from .sizing import allocations, describe, pages_needed, version_tuple
from .versions import model


def _binary() -> str:
    for name in ("mariadbd", "mysqld"):
        p = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")
        if p:
            return p
    raise InputError("no MariaDB/MySQL server binary found: install the server package "
                     "(Debian: mariadb-server) so that it can check the settings itself")


def parse_settings(args: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for a in args:
        name, eq, value = a.lstrip("-").partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z][\w\-]*", name.strip()):
            raise InputError(f"{a!r}: give MySQL/MariaDB options as NAME=VALUE, e.g. "
                             "innodb_buffer_pool_size=48G")
        out[norm(name)] = value.strip()
    return out


def resolved(binary: str, settings: dict[str, str]) -> tuple[dict[str, str], str, str | None]:
    """(every option's final value, flavour, version) as the server binary reports them."""
    args = [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]
    try:
        r = subprocess.run([binary, "--no-defaults", "--verbose", "--help", *args],
                           capture_output=True, text=True, timeout=30, cwd="/")
        v = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"{binary} could not be run: {exc}") from None
    errors = [re.sub(r"^.*?\[ERROR\]\s*(\S+: )?", "", ln) for ln in r.stderr.splitlines()
              if "[ERROR]" in ln]
    if r.returncode != 0 or errors:
        raise InputError(f"{binary.rsplit('/', 1)[-1]} refuses these settings: "
                         f"{errors[0] if errors else r.stderr.strip()[:200]}")
    values: dict[str, str] = {}
    table = r.stdout.split("Value (after reading options)", 1)[-1]
    for line in table.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and re.fullmatch(r"[a-z][\w\-.]*", parts[0]):
            values[norm(parts[0])] = parts[1].strip()
    text = v.stdout + v.stderr
    flavour = "mariadb" if "mariadb" in text.lower() else "mysql"
    mt = re.search(r"Ver (\d+\.\d+\.\d+)", text)
    return values, flavour, mt.group(1) if mt else None


def what_if(args: list[str], host: HostFacts, version: str | None) -> Instance:
    settings = parse_settings(args)
    binary = _binary()
    values, flavour, ver = resolved(binary, settings)
    if version and ver and not ver.startswith(version):
        raise InputError(f"--server-version {version}: the installed server is {flavour} {ver}; "
                         "size checks settings with the server installed here")
    s = {k: v for k, v in values.items() if v not in ("(No default value)",)}
    s["large_pages"] = "ON"  # what it would need on huge pages
    # --help shows innodb_log_file_mmap's compiled default (TRUE on 10.11.19), but a server
    # whose log is on an ordinary file system runs with it off and allocates both log buffers
    # (measured: @@innodb_log_file_mmap = 0 on the running 10.11.19 here): count them unless
    # it is set on purpose.
    s["innodb_log_file_mmap"] = settings.get("innodb_log_file_mmap", "OFF")
    try:
        allocs = allocations(s, flavour, version_tuple(ver))
    except OptionFileError as exc:
        raise InputError(str(exc)) from None
    page_kb = host.default_hugepage_kb or 2048
    sizes = sorted(set(host.page_sizes_kb) | {page_kb})
    pages = {kb: pages_needed(allocs, kb) for kb in sizes}
    exact = all(a.exact for a in allocs)
    parts = describe(allocs)
    label = " ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
    name = " ".join(filter(None, ("planned", "MariaDB" if flavour == "mariadb" else "MySQL", ver)))
    inst = Instance("mysql", "mysql:planned", f"{name} ({label})",
                    False, version=ver, settings={**settings, "flavour": flavour})
    inst.demand = Demand(inst.id, sum(a.bytes for a in allocs), page_kb, pages, exact,
                         f"large-page allocations of {model(flavour, version_tuple(ver)).summary()}"
                         f", with the settings as {binary} resolves them: {parts}")
    return inst

