"""Sizing a planned PostgreSQL configuration (`hpadvise size postgres NAME=VALUE ...`).

PostgreSQL >= 15 reports the huge pages its shared memory needs for any settings without
starting: `postgres -C shared_memory_size_in_huge_pages` (runtime-computed GUC, docs "Preset
Options"), run here on a throwaway data directory made by initdb with the settings on its
command line, once per page size (`-c huge_page_size=...`). The answer is PostgreSQL's own, for
the version named. Older versions get the per-major estimate (sizing.py), marked as one.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile

from hpadvise.api.face import (Demand, HostFacts, InputError, Instance, Unknown,
                               run_without_huge_pages)

from .binaries import major_of
from .conf import DEFAULTS, ConfError, parse_memory
from .sizing import (estimate_bytes, estimate_source, estimate_values, page_kb_of,
                     pages_from_bytes)


def installed(bindirs: tuple[str, ...] = ()) -> dict[int, str]:
    """Major -> bindir of every PostgreSQL given with --pg-bindir (first) or installed in the
    layouts packages use (Debian's /usr/lib/postgresql/N, RHEL's /usr/pgsql-N), each checked
    by its own --version."""
    out: dict[int, str] = {}
    for d in [*bindirs, *sorted(glob.glob("/usr/lib/postgresql/*/bin")
                                + glob.glob("/usr/pgsql-*/bin"))]:
        m = major_of(d)
        if m is not None:
            out.setdefault(m, d)
    return out


def _binaries(version: str | None, bindirs: tuple[str, ...] = ()) -> tuple[int, str]:
    for d in bindirs:
        if major_of(d) is None:
            raise InputError(f"--pg-bindir {d}: no PostgreSQL server there (no postgres whose "
                             "--version answers); give the directory holding postgres and initdb")
    found = installed(bindirs)
    if bindirs and not version:  # the binaries given are the ones to ask
        m = major_of(bindirs[-1])
        return m, found[m]
    majors = sorted(found)
    if version:
        if not version.isdigit():
            raise InputError(f"--server-version {version}: give a PostgreSQL major version such as 15")
        if int(version) not in majors:
            raise InputError(f"PostgreSQL {version} is not installed here (installed: "
                             f"{', '.join(map(str, majors)) or 'none'}); install "
                             f"postgresql-{version} or leave out --server-version")
        return int(version), found[int(version)]
    if majors:
        return majors[-1], found[majors[-1]]
    which = shutil.which("postgres")
    if not which:
        raise InputError("no PostgreSQL server binaries found; install the server package "
                         "(Debian: apt-get install postgresql)")
    d = os.path.dirname(os.path.realpath(which))
    return major_of(d) or 0, d


def parse_settings(args: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for a in args:
        name, eq, value = a.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][\w.]*", name.strip()):
            raise InputError(f"{a!r}: give PostgreSQL settings as NAME=VALUE, e.g. "
                             "shared_buffers=64GB")
        out[name.strip().lower()] = value.strip()
    return out


def _as_owner() -> dict:
    """Run initdb and postgres as `postgres` when root (both refuse to run as root)."""
    if os.geteuid() != 0:
        return {}
    import pwd
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        raise InputError("running as root needs a `postgres` user to run initdb as; create "
                         "it or run hpadvise size as an ordinary user") from None
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": "/"}


def _fatal(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if "FATAL" in ln or "ERROR" in ln] or \
        stderr.strip().splitlines()[:1]
    msg = re.sub(r"^.*?(FATAL|ERROR):\s*", "", lines[0] if lines else "unknown error")
    hint = next((ln.split("HINT:", 1)[1].strip() for ln in stderr.splitlines()
                 if "HINT:" in ln), "")
    return msg + (f" ({hint})" if hint else "")


def what_if(args: list[str], host: HostFacts, version: str | None,
            bindirs: tuple[str, ...] = ()) -> Instance:
    settings = parse_settings(args)
    major, bindir = _binaries(version, bindirs)
    page_kb = host.default_hugepage_kb or 2048
    if "huge_page_size" in settings:
        try:
            hps = parse_memory("huge_page_size", settings["huge_page_size"])
        except ConfError as exc:
            raise InputError(str(exc)) from None
        page_kb = page_kb_of(hps, host) or page_kb
        if hps and (hps // 1024) not in host.page_sizes_kb:
            raise InputError(f"huge_page_size={settings['huge_page_size']}: this host has no "
                             f"such page size (it has {', '.join(f'{k} kB' for k in host.page_sizes_kb)})")
    sizes = sorted(set(host.page_sizes_kb) | {page_kb})
    label = " ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
    release = str(major) if major else Unknown(
        "the release of the planned PostgreSQL", f"{bindir}/postgres --version did not answer "
        "with one", "--pg-bindir DIR names the server binaries to ask")
    inst = Instance("postgres", "postgres:planned", f"planned PostgreSQL {major or ''} "
                    f"({label})".replace("  ", " "), False, version=release,
                    settings=dict(settings))
    if major and major < 15:
        inst.demand = _estimate(inst, settings, host, page_kb, sizes, major)
        return inst
    kw = _as_owner()
    tmp = tempfile.mkdtemp(prefix="hpadvise-size-")
    try:
        if kw:
            os.chown(tmp, kw["user"], kw["group"])
        data = f"{tmp}/data"
        # its backends take no page of the host's pools, which may hold a stopped
        # cluster's pages (kit/nohuge.py)
        r = run_without_huge_pages([f"{bindir}/initdb", "-D", data, "-N", "-A", "trust",
                                    "-U", "postgres"], capture_output=True, text=True,
                                   timeout=120, **kw)
        if r.returncode != 0:
            raise InputError(f"initdb for sizing failed: {_fatal(r.stderr or r.stdout)}")
        cmd = [f"{bindir}/postgres", "-D", data, "-C", "shared_memory_size_in_huge_pages"]
        for k, v in settings.items():
            if k != "huge_page_size":
                cmd += ["-c", f"{k}={v}"]
        counts: dict[int, int] = {}
        default_kb = host.default_hugepage_kb or 2048
        for kb in sizes:
            # 0 is the kernel's default size ("huge_page_size", PostgreSQL docs 20.4.1) and
            # the one value every build takes: one built without MAP_HUGE_MASK rejects any
            # other (check_huge_page_size, sysv_shmem.c), and then cannot use that size.
            r = subprocess.run(cmd + ["-c", "huge_page_size=" + (
                "0" if kb == default_kb else f"{kb}kB")], capture_output=True, text=True,
                timeout=60, **kw)
            if r.returncode != 0 or not r.stdout.strip().isdigit():
                if kb != page_kb and "huge_page_size" in r.stderr:
                    continue  # a size this build cannot use: not offered to the plan
                raise InputError(f"PostgreSQL {major or '(release not read)'} refuses these "
                                 f"settings: {_fatal(r.stderr)}")
            counts[kb] = int(r.stdout.strip())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # a page size given on purpose is kept; otherwise the plan may choose one
    inst.demand = Demand(inst.id, None, page_kb, counts, True,
                         f"postgres -C shared_memory_size_in_huge_pages (PostgreSQL "
                         f"{major or 'of a release not read'}, a throwaway initdb with these "
                         "settings)",
                         selectable="huge_page_size" not in settings)
    return inst


def _estimate(inst: Instance, settings: dict[str, str], host: HostFacts, page_kb: int,
              sizes: list[int], major: int) -> Demand:
    s = {**DEFAULTS, **settings}
    try:
        vals = estimate_values(s)
    except ConfError as exc:
        raise InputError(str(exc)) from None
    size_b = estimate_bytes(vals, major, str(s.get("io_method", "worker")))
    return Demand(inst.id, size_b, page_kb, {kb: pages_from_bytes(size_b, kb) for kb in sizes},
                  False, estimate_source(major, f"PostgreSQL {major} cannot report it"),
                  selectable=major >= 14)
