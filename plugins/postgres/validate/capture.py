"""`hpadvise capture`: record a running cluster's statements for `validate --replay`.

What pgreplay needs in the log (pgreplay(1), DESCRIPTION): every statement (log_statement =
'all'), the sessions' starts and ends (log_connections, log_disconnections), messages in
English (lc_messages), errors' statements (log_min_error_statement at 'log' or lower in
severity order), and either csvlog or stderr lines prefixed '%m|%u|%d|%c|'. All of these are
reloadable settings (context sighup or superuser; PostgreSQL docs, chapter 20.8), so a capture
changes them with ALTER SYSTEM and a reload, journaled as apply's changes are (a capture
killed midway is undone by `hpadvise rollback`), and puts them back the same way at its end.
log_destination can add csvlog only where the logging collector runs (logging_collector is a
restart-only setting): there the capture gives the server a log directory of its own, so the
statements reach no log but the capture's; elsewhere it reads the server's stderr file, with
the prefix, after the user's --yes (capture_log.py). A capture stacked on one not rolled back
is refused (hpadvise.ledger.stacked).

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

from hpadvise.api.face import InputError, Restart

from ..actions import connect_socket
from .capture_log import (PREFIX, OWN_FILE, CaptureDir, Follower, PgLogSetting,  # noqa: F401
                          log_route, own_dir, server_logs, wait_log_in)

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

    @property
    def pg_ctl(self) -> str:
        """The cluster's own pg_ctl; the one on PATH where its binaries were not found."""
        return f"{self.s['bindir']}/pg_ctl" if self.s.get("bindir") else "pg_ctl"

    def shell(self, new) -> list[str]:
        import shlex
        return [f"runuser -u {shlex.quote(self.s['owner'])} -- "
                f"{shlex.quote(self.pg_ctl)} -D "
                f"{shlex.quote(self.s['datadir'])} reload"]

    def running(self) -> bool:
        from ..actions import read_pid
        return read_pid(self.s["datadir"]) is not None

    def set(self, value) -> None:
        from hpadvise.benchmarks.face import check_run, run_as
        import pwd
        check_run([self.pg_ctl, "-D", self.s["datadir"], "reload"],
                  **run_as(pwd.getpwnam(self.s["owner"])))


def steps_for(c, spec: dict, fmt: str, own: str | None) -> list[tuple[PgLogSetting, dict]]:
    """The settings pgreplay needs, in the order they are set. With a log directory of the
    capture's own (`own`), the log's place comes first (capture_log's docstring)."""
    want = {"log_directory": own, "log_filename": OWN_FILE,
            "log_destination": "csvlog"} if own else {}
    want |= NEEDED
    if fmt == "stderr":
        want["log_line_prefix"] = PREFIX
    elif not own:
        with connect_socket(c.socket_dir, c.port, c.owner, 5, c.bindir) as conn:
            dest = conn.execute("SHOW log_destination")[0][0]
        if "csvlog" not in dest.split(","):
            want["log_destination"] = f"{dest},csvlog"
    return [(PgLogSetting(k, v, **spec), {"value": v}) for k, v in want.items()]


def stays_in(c, fmt: str, stderr_path: str | None) -> str | None:
    """Where the statements will stay beside the capture, or None where they land in the
    capture alone (a logging collector, and a server in the host's own root)."""
    if fmt == "stderr":
        return f"the server's log file {stderr_path}, which it opened when it started"
    if c.root is not None:  # its log directory is in its own root: the capture cannot
        return "the server's own log directory (in its container's root)"  # give it one
    return None


def capture(inst, out_dir: str, duration_s: int, journal_dir: str, base: bool,
            say: Callable[[str], None], progress: Callable[[str], None],
            yes: bool = False) -> dict:
    """Record `inst`'s statements for duration_s seconds into out_dir (see the module's
    docstring); every setting put back at the end, also on Ctrl-C and SIGTERM."""
    from hpadvise.benchmarks.face import journal as jr
    from hpadvise.benchmarks.face import run_as
    from hpadvise.benchmarks.face import refuse_stacked
    import pwd
    from ..actions import spec_of
    from .copying import base_backup_into, data_bytes, source_settings
    c = inst.state
    spec = spec_of(c, inst.id)
    fmt, stderr_path = log_route(c)
    stays = stays_in(c, fmt, stderr_path)
    if stays and not yes:
        raise InputError(f"the statements captured (passwords in ALTER ROLE ... PASSWORD "
                         f"among them) would stay in {stays} after the capture; give --yes "
                         "to capture anyway, or set logging_collector = on (a restart) and "
                         "the capture keeps them in its own log")
    own = None if stays else own_dir()
    logdir = [(CaptureDir(own, c.owner, inst.id), "present")] if own else []
    steps = steps_for(c, spec, fmt, own)
    jr.open_dir(journal_dir)
    refuse_stacked(journal_dir, [a for a, _ in logdir + steps], "capture")
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
                             os.path.join(out_dir, "base"), run_as(pwd.getpwnam(c.owner)),
                             exclude=server_logs(c, stderr_path))
            meta["base"] = "base"
        with jr.Lock(journal_dir):
            refuse_stacked(journal_dir, [a for a, _ in logdir + steps], "capture")
            j = jr.Journal.create(journal_dir, {"argv": sys.argv[1:], "command": "capture",
                                                "instances": [inst.id]})
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise
    reload = PgReload(**spec)
    follower, done = None, []

    def change(action, new) -> None:
        e = j.intent(action, action.get(), new)
        action.set(new)
        j.done(e, action.get())
        done.append((e, action))

    def reloaded() -> None:
        e = j.intent(reload, None, True)
        reload.set(True)
        j.done(e, True)
    try:
        for action, new in logdir + steps[:3 if own else 0]:
            change(action, new)
        if own:  # the log's new place first: no statement is logged before it is there
            reloaded()
            if not wait_log_in(c.datadir, own, inside=True):
                raise InputError(f"the logging collector of {inst.id} did not open a log in "
                                 f"{own} within 10 s; nothing was captured")
        for action, new in steps[3 if own else 0:]:
            change(action, new)
        follower = Follower(os.path.join(out_dir, meta["log"]), fmt, c.datadir, stderr_path)
        reloaded()
        j.finish("capture", "logging settings on until the capture ends")
        meta["started"] = time.time()
        say(f"capturing the statements of {inst.id} for {duration_s} s into {out_dir}")
        while (left := meta["started"] + duration_s - time.time()) > 0:
            time.sleep(min(1.0, left))
            follower.pump()
            progress(f"{follower.bytes / 1e6:,.1f} MB captured, "
                     f"{time.time() - meta['started']:.0f} of {duration_s} s")
    finally:
        if own and len(done) > 3:  # the statements off first, while the log is still ours
            try:
                for e, action in reversed(done[3:]):
                    action.restore(e.old)
                reload.set(True)
                if follower is not None:  # what the server logged before the reload
                    follower.settle()
            except Exception:
                pass  # the rollback below puts them back, and says what it could not
        if follower is not None:
            follower.pump()
            follower.close()
            meta["bytes"] = follower.bytes
        meta["ended"] = time.time()
        with jr.Lock(journal_dir):
            _, errors = jr.rollback(j)
            j.mark_rolled_back(errors)
        if own and not errors and not wait_log_in(c.datadir, own, inside=False):
            errors.append(f"the server still logs into {own}")
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
