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

from hpadvise.api.face import SysRoot, exe_of

from .opts import parse
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
    line = parse(sr.read(f"{datadir}/postmaster.opts", quiet_missing=True) or "")
    word = line.binary if line else ""
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
        exe = exe_of(sr, c.pid)  # in its own root, where it has one
        if exe:
            return os.path.dirname(exe), "the postmaster's own binary"
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


def installed() -> list[tuple[str, int, str]]:
    """Every PostgreSQL binary directory installed where packagers put them, or on PATH:
    (bindir, major, where it was found), highest major first."""
    import glob
    found: dict[str, tuple[int, str]] = {}
    for pattern, where in (("/usr/lib/postgresql/*/bin", "Debian's layout"),
                           ("/usr/pgsql-*/bin", "the PGDG RHEL layout"),
                           ("/usr/local/pgsql/bin", "a source build's prefix")):
        for d in sorted(glob.glob(pattern)):
            if (m := major_of(d)) is not None:
                found.setdefault(os.path.realpath(d), (m, f"{d} ({where})"))
    for d in _path_bindirs():
        if (m := major_of(d)) is not None:
            found.setdefault(os.path.realpath(d), (m, f"{d} (PATH)"))
    return sorted(((d, m, w) for d, (m, w) in found.items()), key=lambda x: -x[1])


SCRATCH_TOOLS = ("postgres", "initdb", "pg_ctl", "psql")


def for_scratch(given: tuple[str, ...], followed) -> tuple[str, str]:
    """The binaries validate's scratch servers run: `--pg-bindir`; else those of the running
    cluster validate follows (its own executable, so its major: Debian's, RHEL's or a custom
    prefix alike); else the highest major installed. (bindir, why that one); one line naming
    what was looked for where when none has what a scratch server needs."""
    from hpadvise.api.face import InputError

    def complete(d: str) -> bool:
        return all(os.access(os.path.join(d, t), os.X_OK) for t in SCRATCH_TOOLS)
    for d in given:
        if major_of(d) is None or not complete(d):
            raise InputError(f"--pg-bindir {d}: no PostgreSQL server binaries there "
                             f"({', '.join(SCRATCH_TOOLS)}); name the bin directory of an "
                             "installation")
        return d, "--pg-bindir"
    c = getattr(followed, "state", None)
    own, major = getattr(c, "bindir", None), getattr(c, "major", None)
    if own and complete(own):
        return own, f"the binaries of {followed.id}, the cluster validate follows"
    for d, m, where in installed():  # the user's major where one runs, else the highest
        if complete(d) and (major is None or m == major):
            return d, f"{where.split(' (', 1)[-1].rstrip(')')}, PostgreSQL {m}" + (
                f", the major of {followed.id}" if major else "")
    looked = ["--pg-bindir (not given)",
              f"the binaries of {followed.id} ({own or 'unknown'})" if followed is not None
              else "a running cluster (none)",
              "/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/usr/local/pgsql/bin",
              "pg_config and postgres on PATH"]
    raise InputError("PostgreSQL server binaries (" + ", ".join(SCRATCH_TOOLS) + ") not found "
                     "in " + "; ".join(looked) + ": install the server package (Debian: "
                     "apt-get install postgresql) or name them with --pg-bindir DIR")


def client_tool(bindir: str, name: str) -> tuple[str | None, str]:
    """A client program (pgbench) from the server's own binaries, else from another
    installation (a client of another major speaks the same protocol), else None."""
    own = os.path.join(bindir, name)
    if os.access(own, os.X_OK):
        return own, own
    for d, m, where in installed():
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p, f"{p} (PostgreSQL {m}'s: {bindir} has none)"
    p = shutil.which(name)
    if p and os.path.basename(os.path.realpath(p)) == "pg_wrapper":
        p = None  # Debian's dispatcher runs one of the installations already looked at
    return (p, f"{p} (PATH: {bindir} has none)") if p else (None, "")
