"""`hpadvise capture`: record a running cluster's statements for `validate --replay`.

What pgreplay needs in the log (pgreplay(1), DESCRIPTION): every statement (log_statement =
'all'), the sessions' starts and ends (log_connections, log_disconnections), messages in
English (lc_messages), errors' statements (log_min_error_statement at 'log' or lower in
severity order), and either csvlog or stderr lines prefixed '%m|%u|%d|%c|'. All of these are
reloadable settings (context sighup or superuser; PostgreSQL docs, chapter 20.8), so a capture
changes them with ALTER SYSTEM and a reload, journaled as apply's changes are (a capture
killed midway is undone by `hpadvise rollback`), and puts them back the same way at its end.
log_destination can add csvlog only where the logging collector runs (logging_collector is a
restart-only setting): elsewhere the capture reads the server's stderr file, with the prefix.

Before the log starts, the capture takes a base backup (copying.base_backup): pgreplay
replays onto "a clone of the database cluster that generated the logs from the time
immediately before the logs were generated" (pgreplay(1)). The capture directory holds
statements.csv or statements.log, base/ (the backup), settings.conf (the source's settings a
copy starts with) and capture.json. A statement log holds the data the statements carry: the
directory is root's alone (0700).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from typing import Callable

from hpadvise.actions import Restart
from hpadvise.errors import InputError

from .actions import PgSetting, connect_socket

PREFIX = "%m|%u|%d|%c|"  # the stderr prefix pgreplay parses (pgreplay(1))
_PREFIXED = re.compile(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ [^|]*\|")
# The settings a capture needs (pgreplay(1)); stderr adds log_line_prefix, csv adds csvlog.
NEEDED = {"log_statement": "all", "log_connections": "on", "log_disconnections": "on",
          "log_min_error_statement": "log", "lc_messages": "C"}
PRIVACY = ("a statement log holds the data its statements carry (values, and passwords in "
           "statements such as ALTER ROLE ... PASSWORD): keep {dir} private and delete it "
           "when done")


class PgReload(Restart):
    """A reload of the cluster's configuration (pg_ctl reload, as its owner): what makes the
    capture's settings take effect, and, run last by rollback as restarts are, what puts the
    restored ones back in force."""
    kind = "pg_reload"

    @property
    def label(self) -> str:
        return f"reload {self.s.get('instance') or self.s['datadir']}"

    def shell(self, new) -> list[str]:
        import shlex
        return [f"runuser -u {shlex.quote(self.s['owner'])} -- "
                f"{shlex.quote(self.s['bindir'] + '/pg_ctl')} -D "
                f"{shlex.quote(self.s['datadir'])} reload"]

    def running(self) -> bool:
        from .actions import read_pid
        return read_pid(self.s["datadir"]) is not None

    def set(self, value) -> None:
        from hpadvise.benchmarks.target import check_run, run_as
        import pwd
        check_run([f"{self.s['bindir']}/pg_ctl", "-D", self.s["datadir"], "reload"],
                  **run_as(pwd.getpwnam(self.s["owner"])))


def log_route(c) -> tuple[str, str | None]:
    """How the capture will read the log: ("csv", None) where the logging collector runs,
    else ("stderr", the file the postmaster's standard error goes to). One line of bad input
    where it goes to a pipe or socket (journald, syslog)."""
    with connect_socket(c.socket_dir, c.port, c.owner, 5, c.bindir) as conn:
        collector = conn.execute("SHOW logging_collector")[0][0]
    if collector == "on":
        return "csv", None
    pid = _postmaster(c.datadir)
    try:
        path = os.readlink(f"/proc/{pid}/fd/2")
    except OSError:
        path = ""
    if not (path.startswith("/") and os.path.isfile(path)):
        raise InputError(f"the cluster in {c.datadir} writes its log to {path or 'nowhere'}, "
                         "not to a file: set logging_collector = on (takes a restart) and "
                         "capture again")
    return "stderr", path


def _postmaster(datadir: str) -> int:
    from .actions import read_pid
    pid = read_pid(datadir)
    if pid is None:
        raise InputError(f"the cluster in {datadir} is not running; start it and capture again")
    return pid


def current_log(datadir: str, kind: str = "csvlog") -> str | None:
    """The log file of `kind` the server writes now, from current_logfiles in its data
    directory (written by the logging collector; PostgreSQL docs, 73.1 "Database File
    Layout")."""
    try:
        with open(os.path.join(datadir, "current_logfiles")) as f:
            for line in f:
                k, _, path = line.strip().partition(" ")
                if k == kind:
                    return path if path.startswith("/") else os.path.join(datadir, path)
    except OSError:
        pass
    return None


def csv_name(stderr_file: str) -> str:
    """The csvlog file beside a stderr log file: log_filename with .log replaced by .csv, or
    .csv appended (PostgreSQL docs, 20.8.1, log_destination)."""
    return (stderr_file[:-4] if stderr_file.endswith(".log") else stderr_file) + ".csv"


def steps_for(c, spec: dict, fmt: str) -> list[tuple[PgSetting, dict]]:
    want = dict(NEEDED)
    with connect_socket(c.socket_dir, c.port, c.owner, 5, c.bindir) as conn:
        if fmt == "csv":
            dest = conn.execute("SHOW log_destination")[0][0]
            if "csvlog" not in dest.split(","):
                want["log_destination"] = f"{dest},csvlog"
        else:
            want["log_line_prefix"] = PREFIX
    return [(PgSetting(k, v, **spec), {"value": v}) for k, v in want.items()]


def _size(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


class Follower:
    """The bytes the server appends to its log from now on, copied into `out`; for csvlog,
    across the collector's rotations (current_logfiles names the new file)."""

    def __init__(self, out: str, fmt: str, datadir: str, stderr_path: str | None):
        self.fmt, self.datadir, self.bytes, self.keep = fmt, datadir, 0, False
        self.path = stderr_path if fmt == "stderr" else current_log(datadir)
        self.offset = _size(self.path)
        # the csvlog file a reload will open may be there already (a fixed log_filename):
        # what it holds now is from before the capture
        stderr_file = current_log(datadir, "stderr") if fmt == "csv" else None
        self.before = {csv_name(stderr_file): _size(csv_name(stderr_file))} if stderr_file \
            else {}
        self.out = open(out, "wb")
        os.chmod(out, 0o600)

    def pump(self) -> None:
        if self.fmt == "csv":
            now = current_log(self.datadir)
            if now != self.path:
                if self.path:
                    self._copy()  # the rest of the file rotated away
                self.path, self.offset = now, self.before.pop(now, 0)
        if self.path:
            self._copy()

    def _copy(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # whole lines only: the rest comes with the next pump
        kept = data[:end] if self.fmt == "csv" else self.prefixed(data[:end])
        self.out.write(kept)
        self.offset += end
        self.bytes += len(kept)

    def prefixed(self, data: bytes) -> bytes:
        """stderr lines written with pgreplay's prefix, and their continuation lines (a
        statement's further lines start with a tab): a server's lines from before the reload,
        or from a process that has not reloaded yet, carry the old prefix and are left out."""
        out = []
        for line in data.splitlines(keepends=True):
            if _PREFIXED.match(line):
                self.keep = True
            elif not line.startswith(b"\t"):
                self.keep = False
            if self.keep:
                out.append(line)
        return b"".join(out)

    def close(self) -> None:
        self.out.close()


def capture(inst, out_dir: str, duration_s: int, journal_dir: str, base: bool,
            say: Callable[[str], None], progress: Callable[[str], None]) -> dict:
    """Record `inst`'s statements for duration_s seconds into out_dir (see the module's
    docstring); every setting put back at the end, also on Ctrl-C and SIGTERM."""
    from hpadvise import journal as jr
    from hpadvise.benchmarks.target import run_as
    import pwd
    from .actions import spec_of
    from .copying import base_backup_into, data_bytes, source_settings
    c = inst.state
    spec = spec_of(c, inst.id)
    fmt, stderr_path = log_route(c)
    steps = steps_for(c, spec, fmt)
    os.makedirs(out_dir, mode=0o700)
    meta = {"instance": inst.id, "datadir": c.datadir, "format": fmt, "major": c.major,
            "log": f"statements.{'csv' if fmt == 'csv' else 'log'}", "base": None}

    def psql(sql: str) -> str:
        with connect_socket(c.socket_dir, c.port, c.owner, 10, c.bindir) as conn:
            return "\n".join("|".join(v or "" for v in row) for row in conn.execute(sql))
    try:  # before the log starts: a failure here leaves no capture directory behind
        meta["server_version"] = psql("SHOW server_version")
        meta["shared_buffers"] = psql("SHOW shared_buffers")
        meta["data_bytes"] = data_bytes(psql)
        with open(os.path.join(out_dir, "settings.conf"), "w") as f:
            f.write("\n".join(source_settings(psql)) + "\n")
        if base:
            say(f"taking a base backup of {inst.id} ({meta['data_bytes'] / 1e6:,.0f} MB) ...")
            base_backup_into(c.bindir, c.socket_dir, c.port, c.owner,
                             os.path.join(out_dir, "base"), run_as(pwd.getpwnam(c.owner)))
            meta["base"] = "base"
        jr.open_dir(journal_dir)
        with jr.Lock(journal_dir):
            j = jr.Journal.create(journal_dir, {"argv": sys.argv[1:], "command": "capture",
                                                "instances": [inst.id]})
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise
    reload = PgReload(**spec)
    follower = None
    try:
        for action, new in steps:
            e = j.intent(action, action.get(), new)
            action.set(new)
            j.done(e, action.get())
        e = j.intent(reload, None, True)
        follower = Follower(os.path.join(out_dir, meta["log"]), fmt, c.datadir, stderr_path)
        reload.set(True)
        j.done(e, True)
        j.finish("capture", "logging settings on until the capture ends")
        meta["started"] = time.time()
        say(f"capturing the statements of {inst.id} for {duration_s} s into {out_dir}")
        while (left := meta["started"] + duration_s - time.time()) > 0:
            time.sleep(min(1.0, left))
            follower.pump()
            progress(f"{follower.bytes / 1e6:,.1f} MB captured, "
                     f"{time.time() - meta['started']:.0f} of {duration_s} s")
    finally:
        if follower is not None:
            follower.pump()
            follower.close()
            meta["bytes"] = follower.bytes
        meta["ended"] = time.time()
        with jr.Lock(journal_dir):
            done, errors = jr.rollback(j)
            j.mark_rolled_back(errors)
        meta["restore_errors"] = errors
        with open(os.path.join(out_dir, "capture.json"), "w") as f:
            json.dump(meta, f, indent=2)
    return meta


def read_capture(path: str) -> dict | None:
    """A capture directory's capture.json with its paths made absolute, or None where `path`
    is a log file."""
    if not os.path.isdir(path):
        return None
    try:
        with open(os.path.join(path, "capture.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        raise InputError(f"--replay {path}: a directory without a readable capture.json; give "
                         "a directory made by `hpadvise capture`, or a log file") from None
    meta["log"] = os.path.join(path, meta.get("log") or "")
    meta["base"] = os.path.join(path, meta["base"]) if meta.get("base") else None
    meta["settings"] = os.path.join(path, "settings.conf")
    if not re.match(r"^\d+$", str(meta.get("major") or "")):
        raise InputError(f"--replay {path}: capture.json names no PostgreSQL major")
    return meta
