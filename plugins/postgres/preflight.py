"""PostgreSQL's own binary asked about a cluster, without touching its data directory: whether
the server would start again with its configuration as it is now, and figures only a start
computes.

- `postgres -C NAME` reads the configuration files exactly as a start does and stops with
  FATAL "configuration file ... contains errors" (exit 1) on a syntax error, an include loop
  ("configuration file recursion") or a value its parameter rejects, before it looks at the
  data directory (src/backend/postmaster/postmaster.c, PostmasterMain: SelectConfigFiles, then
  the -C exit for ordinary parameters). So it runs beside a live server. Given the arguments
  the server was started with (postmaster.opts, which `pg_ctl restart` reuses), it answers
  "would a restart come back?" with the server's own parser: a cluster whose files broke after
  it started is never stopped (actions.PgRestart), and check reports it.
- A runtime-computed value (shared_memory_size_in_huge_pages) needs more: the postmaster checks
  the data directory, takes its lock file postmaster.pid and reads global/pg_control before it
  prints (the same function, after CreateDataDirLockFile). On a stopped cluster with a stale
  postmaster.pid that would replace the file and remove it at exit: evidence of an unclean
  stop, gone. It runs against a shadow instead: PG_VERSION, global/pg_control and
  postgresql.auto.conf copied into a private temporary directory named as data_directory on
  the command line (which outranks the files), the configuration files read where they are.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

from .opts import parse

# What a shadow data directory holds: the files the postmaster reads before the -C answer.
SHADOW_FILES = ("PG_VERSION", "global/pg_control", "postgresql.auto.conf")


def as_owner(uid: int | None) -> dict | None:
    """subprocess arguments that run a command as the cluster owner (PostgreSQL refuses to run
    as root); None when this process can be neither root nor the owner."""
    euid = os.geteuid()
    if uid is None or euid not in (0, uid):
        return None
    if euid != 0:
        return {"cwd": "/"}
    pw = pwd.getpwuid(uid)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": "/"}


@contextlib.contextmanager
def shadow(datadir: str, uid: int) -> Iterator[str]:
    """A private copy of what the postmaster reads of `datadir` before a -C answer (mode
    0700, owned by the cluster owner, as checkDataDir wants it); removed afterwards."""
    d = tempfile.mkdtemp(prefix="hpadvise-pgshadow-")
    try:
        os.makedirs(f"{d}/global")
        for name in SHADOW_FILES:
            src = os.path.join(datadir, name)
            if os.path.exists(src):
                shutil.copyfile(src, os.path.join(d, name))
        if os.geteuid() == 0:
            for root, dirs, files in os.walk(d):
                for n in [root] + [os.path.join(root, x) for x in dirs + files]:
                    os.chown(n, uid, -1)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def start_args(datadir: str, config_file: str | None) -> list[str]:
    """The arguments the server gets at its next start: those postmaster.opts records (its
    argv at the last start, the binary first), which `pg_ctl restart` passes again;
    otherwise the directory holding postgresql.conf."""
    try:
        with open(os.path.join(datadir, "postmaster.opts")) as f:
            line = parse(f.read())
        if line is not None and line.args:
            return list(line.args)
    except OSError:
        pass
    return ["-D", os.path.dirname(config_file) if config_file else datadir]


def fatal_lines(stderr: str) -> str:
    """What the server said against starting, as one line: its LOG lines naming the file and
    line, then the FATAL one (timestamps and prefixes dropped)."""
    keep = [ln.split(":  ", 1)[-1].strip() for ln in stderr.splitlines()
            if "FATAL:" in ln or ("LOG:" in ln and ("line" in ln or "file" in ln))]
    return "; ".join(keep)[:400] or stderr.strip()[-300:]


def would_start(bindir: str | None, datadir: str, config_file: str | None,
                uid: int | None) -> tuple[bool | None, str]:
    """(True, "") when the server's own parser accepts the configuration it would start
    with; (False, why) when it rejects it; (None, why) when it could not be asked."""
    kw = as_owner(uid)
    if bindir is None:
        return None, "no postgres binary of its major to check its configuration with"
    if kw is None:
        return None, "only root or the cluster owner can check its configuration"
    cmd = [os.path.join(bindir, "postgres"), *start_args(datadir, config_file),
           "-C", "huge_pages"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{cmd[0]} -C could not run: {exc}"
    return (True, "") if r.returncode == 0 else (False, fatal_lines(r.stderr))
