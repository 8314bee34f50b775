"""The PostgreSQL binaries that belong to a cluster: never another major's.

`postgres -C` reads the cluster's configuration with the rules of the binary's own major (a
PostgreSQL 15 `postgres` rejects a PostgreSQL 18 configuration: "configuration file ...
contains errors"), and `pg_ctl` must be the cluster's own. So the directory is found, in
order, from: the running postmaster's own executable (/proc/PID/exe); the option the user
gave (`--pg-bindir`); the binary recorded in the data directory's postmaster.opts (its first
word, written at every start); then the layouts packages use, for the cluster's major
(PG_VERSION): Debian/Ubuntu PGDG /usr/lib/postgresql/N/bin, RHEL PGDG /usr/pgsql-N/bin, the
source build's /usr/local/pgsql/bin, and `pg_config --bindir` / `postgres` on PATH. A
candidate counts only when its `postgres --version` reports the cluster's major.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

from hpadvise.sysroot import SysRoot

from .state import Cluster


def layouts(major: int) -> list[str]:
    """Where packages put a major's binaries (PostgreSQL docs "Installation from Source"
    (/usr/local/pgsql); the PGDG packaging for Debian (/usr/lib/postgresql/N) and RHEL
    (/usr/pgsql-N); the official container image is Debian's layout)."""
    return [f"/usr/lib/postgresql/{major}/bin", f"/usr/pgsql-{major}/bin",
            "/usr/local/pgsql/bin"]


@functools.lru_cache(maxsize=None)
def major_of(bindir: str) -> int | None:
    """The major of `bindir/postgres` from its --version ("postgres (PostgreSQL) 18.6";
    10 and later number majors with one figure, 9.x with two)."""
    exe = os.path.join(bindir, "postgres")
    if not os.access(exe, os.X_OK):
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10,
                             cwd="/").stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    mt = re.search(r"\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?", out)
    if not mt:
        return None
    first = int(mt.group(1))
    return first if first >= 10 else first * 10 + int(mt.group(2) or 0)


def _opts_bindir(sr: SysRoot, datadir: str) -> str | None:
    """The directory of the binary postmaster.opts records (written by the postmaster at each
    start: its argv, the first word its path)."""
    text = sr.read(f"{datadir}/postmaster.opts", quiet_missing=True)
    word = (text or "").split(" ", 1)[0].strip().strip('"')
    return os.path.dirname(word) if word.startswith("/") else None


def _path_bindirs() -> list[str]:
    out = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            d = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                               timeout=10, cwd="/").stdout.strip()
            if d:
                out.append(d)
        except (OSError, subprocess.TimeoutExpired):
            pass
    exe = shutil.which("postgres")
    if exe:
        out.append(os.path.dirname(os.path.realpath(exe)))
    return out


def find(sr: SysRoot, c: Cluster, given: tuple[str, ...] = ()) -> tuple[str | None, str]:
    """(bindir, where it came from), or (None, why none fits) for cluster c."""
    if c.pid and sr.live:
        exe = sr.readlink(f"/proc/{c.pid}/exe")
        if exe:
            return os.path.dirname(exe.replace(" (deleted)", "")), "the postmaster's own binary"
    if c.major is None:
        return None, "its major is unknown (PG_VERSION unreadable)"
    tried = []
    for where, dirs in (("--pg-bindir", list(given)),
                        ("postmaster.opts", [d] if (d := _opts_bindir(sr, c.datadir)) else []),
                        ("the packages' layout", layouts(c.major)),
                        ("PATH", _path_bindirs())):
        for d in dirs:
            m = major_of(d)
            if m == c.major:
                return d, f"{d} ({where})"
            if m is not None:
                tried.append(f"{d} is PostgreSQL {m}")
    return None, (f"no PostgreSQL {c.major} binaries found" +
                  (f" ({'; '.join(dict.fromkeys(tried))})" if tried else "") +
                  "; name them with --pg-bindir DIR")
