"""Where a capture's statements go, and how it reads them.

Where the logging collector runs, the capture gives the server a log of its own for its
duration: log_directory (a new directory, the cluster owner's, 0700), log_filename and
log_destination = 'csvlog' are reloadable (PostgreSQL docs, 20.8.1), and on a reload that
changes log_directory or log_filename the collector opens a new file there at once
(src/backend/postmaster/syslogger.c, SysLoggerMain: "If log_directory or log_filename
changed, force a rotation"). So the statements land in that directory alone, never in the
server's own log, and the directory is removed when the settings are put back: statements
are secrets too (ALTER ROLE ... PASSWORD). The order keeps them there: the directory first,
then log_statement and the rest; at the end log_statement and the rest first, then the
directory. Without the collector the server's standard error is a file opened when it
started, which no reload moves: the statements stay in it, and the capture says so and asks
for --yes before it begins.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time

from hpadvise.api.face import Action, ActionError, InputError

from ..actions import PgSetting, connect_socket

PREFIX = "%m|%u|%d|%c|"  # the stderr prefix pgreplay parses (pgreplay(1))
_PREFIXED = re.compile(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ [^|]*\|")
OWN_FILE = "capture-%Y%m%d-%H%M%S.log"  # the csvlog file is its .csv (csv_name)


class PgLogSetting(PgSetting):
    """A logging setting a capture changes: ALTER SYSTEM, in force after a reload (every
    logging setting it needs is reloadable, PostgreSQL docs, 20.8), not a restart."""
    kind = "pg_log_setting"

    def describe(self, old, new) -> str:
        if not old:
            return f"{self.label}: restored"
        return f"{self.label}: {old.get('value') or '(not set)'} -> " \
               f"{new.get('value') or '(not set)'} (ALTER SYSTEM and a reload)"


class CaptureDir(Action):
    """The directory a capture gives the server's log, the cluster owner's and 0700: absent
    before, "present" while the capture runs; put back, it is removed with what it holds
    (the capture's copy of the statements is in the capture directory)."""
    kind = "pg_capture_dir"

    def __init__(self, path: str, owner: str, instance: str | None = None,
                 engine: str = "postgres"):
        self.path, self.owner, self.instance = path, owner, instance

    def spec(self) -> dict:
        return {"engine": "postgres", "kind": self.kind, "path": self.path,
                "owner": self.owner, "instance": self.instance}

    @property
    def label(self) -> str:
        return f"the capture's log directory {self.path}"

    def get(self) -> str | None:
        return "present" if os.path.isdir(self.path) else None

    def set(self, value: str | None) -> None:
        import pwd
        try:
            if value == "present":
                pw = pwd.getpwnam(self.owner)
                os.mkdir(self.path, 0o700)
                os.chown(self.path, pw.pw_uid, pw.pw_gid)
            elif os.path.isdir(self.path) and not os.path.islink(self.path):
                shutil.rmtree(self.path)
        except (OSError, KeyError) as exc:
            raise ActionError(f"{self.label}: {getattr(exc, 'strerror', None) or exc}") from None

    def invalid(self, value) -> str | None:
        if not (isinstance(self.path, str) and os.path.basename(self.path).startswith(
                "hpadvise-capture-")):
            return "names no capture directory"
        return None if value in (None, "present") else "is neither absent nor present"

    def describe(self, old, new) -> str:
        return f"create {self.label}" if new else f"remove {self.label}"

    def shell(self, new) -> list[str]:
        import shlex
        return [f"install -d -m 0700 -o {shlex.quote(self.owner)} {shlex.quote(self.path)}"
                if new else f"rm -rf {shlex.quote(self.path)}"]


def own_dir() -> str:
    """A new path for the capture's log directory (in TMPDIR: the cluster's owner must reach
    it, and a capture directory under root's own may not be reachable)."""
    return os.path.join(tempfile.gettempdir(),
                        f"hpadvise-capture-{os.getpid()}-{time.time_ns() % 10**9}")


def wait_log_in(datadir: str, directory: str, inside: bool, seconds: float = 10) -> bool:
    """Wait until the collector's csvlog file is (inside=True) or is no longer in
    `directory` (current_logfiles: the collector rewrites it on each rotation)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        path = current_log(datadir) or ""
        if path.startswith(directory + "/") == inside:
            return True
        time.sleep(0.05)
    return False


def server_logs(c, stderr_path: str | None) -> list[str]:
    """The server's own log in its data directory, as paths relative to it: its
    log_directory (where relative, or inside it), its stderr file, current_logfiles. A base
    backup leaves them out (a log holds statements, and their passwords)."""
    out = ["current_logfiles"]
    try:
        with connect_socket(c.socket_dir, c.port, c.owner, 5, c.bindir) as conn:
            logdir = conn.execute("SHOW log_directory")[0][0]
    except Exception:
        logdir = "log"
    data = os.path.realpath(c.datadir)
    for p in (logdir, stderr_path):
        if not p:
            continue
        full = os.path.realpath(p if os.path.isabs(p) else os.path.join(data, p))
        if full.startswith(data + "/"):
            out.append(os.path.relpath(full, data))
    return out


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
    from ..actions import read_pid
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

    def settle(self, quiet_s: float = 0.3, most_s: float = 1.0) -> None:
        """Copy on until the log has not grown for quiet_s, or for most_s at the longest: after
        the reload that turns statements off, what the server logged before it reaches the
        file (the collector writes what its pipe holds within milliseconds; a backend logs
        on until it has read the reload, at its next statement), and a quiet server is not
        waited for the whole second a loaded one may take."""
        start = still = time.monotonic()
        mark = (self.path, _size(self.path))
        while time.monotonic() - start < most_s and time.monotonic() - still < quiet_s:
            time.sleep(0.05)
            self.pump()
            if (now := (self.path, _size(self.path))) != mark:
                mark, still = now, time.monotonic()

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


