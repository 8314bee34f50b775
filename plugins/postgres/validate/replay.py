"""Replaying a captured statement log with pgreplay, as one of validate's drivers.

pgreplay (Debian package `pgreplay`, by Laurenz Albe) reads a PostgreSQL log written with
log_statement = 'all', log_connections and log_disconnections on, lc_messages in English,
and either csvlog or stderr with log_line_prefix = '%m|%u|%d|%c|' (pgreplay(1),
DESCRIPTION). It parses the log once into a replay file (`-f -o FILE`, checked here: a log in
the wrong format ends that parse with exit 1 and "Error parsing line N: ..."), and replays
that file (`-r`) against a server, each logged session on a connection of its own, in the
logged order and at the logged pace divided by the speed factor (`-s`); `-j` jumps over the
times when every connection is idle (pgreplay(1), OPTIONS).

The measure of one replay is its own final report: "Total run time: X seconds" and "SQL
statements executed: N", with "(E or P% of these completed with error)". At the default
speed factor (REPLAY_FASTEST) every statement is behind schedule from the start, so each
session runs its statements back to back and the run time is what the server needs for them:
statements per second is the figure validate compares. At the logged pace (`-s 1`) the run
time is the log's own span whatever the server, and only the lag says anything.

pgreplay cannot replay COPY data, fast-path calls (large objects), or the binary parameters
of a statement; the cluster it replays against must be a clone of the logged one from just
before the log began (pgreplay(1), LIMITATIONS).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from hpadvise.api.face import InputError

# The speed factor validate replays at by default: a day's log in under a tenth of a second of
# schedule, so that the server, not the schedule, sets the pace (pgreplay accepts any
# positive floating point factor; pgreplay(1), -s).
REPLAY_FASTEST = 1e6
# The share of replayed statements that may fail before the replay is refused as not
# matching its data (a clone from before the log makes 0 here; tests/integration).
MAX_ERROR_PCT = 1.0

_PARSED = re.compile(r"^Total SQL statements processed: (\d+)", re.M)
# "Total run time:" then " %d hours" and " %d minutes" where the time reaches them, then
# " %.3f seconds" (the format strings in pgreplay 1.2.0's binary)
_RUNTIME = re.compile(r"^Total run time:(?: (\d+) hours)?(?: (\d+) minutes)? ([\d.]+) seconds",
                      re.M)
_EXECUTED = re.compile(r"^SQL statements executed: (\d+)", re.M)
_ERRORS = re.compile(r"^\((\d+) or ([\d.]+)% of these completed with error\)", re.M)
_CONNECTIONS = re.compile(r"^Total number of connections: (\d+)", re.M)
_PARSE_ERROR = re.compile(r"^Error parsing line (\d+): (.*)$", re.M)


@dataclass
class ReplayStats:
    seconds: float
    statements: int
    errors: int
    error_pct: float
    connections: int | None


def parse_stats(out: str) -> ReplayStats:
    """pgreplay's final report (replay statistics) into figures."""
    rt, ex, er = _RUNTIME.search(out), _EXECUTED.search(out), _ERRORS.search(out)
    if not (rt and ex and er):
        raise ValueError("no replay statistics in pgreplay's output")
    conn = _CONNECTIONS.search(out)
    seconds = int(rt.group(1) or 0) * 3600 + int(rt.group(2) or 0) * 60 + float(rt.group(3))
    return ReplayStats(seconds, int(ex.group(1)), int(er.group(1)),
                       float(er.group(2)), int(conn.group(1)) if conn else None)


def log_format(path: str) -> str:
    """"csv" or "stderr", from the file's first line: a csvlog line starts with the
    timestamp and a comma, a stderr line with the '%m|' prefix pgreplay needs."""
    try:
        with open(path, errors="replace") as f:
            first = f.readline()
    except OSError as exc:
        raise InputError(f"--replay {path}: cannot read it ({exc.strerror})") from None
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? \S+"
    if re.match(stamp + ",", first):
        return "csv"
    if re.match(stamp + r"\|", first):
        return "stderr"
    raise InputError(f"--replay {path}: not a statement log pgreplay reads (its first line is "
                     "neither csvlog nor stderr with log_line_prefix '%m|%u|%d|%c|'); record "
                     "one with `hpadvise capture`")


def parse_log(pgreplay: str, log: str, out: str, run_as: dict) -> int:
    """Parse `log` into the replay file `out` once (pgreplay -f); returns the statements in
    it. A log pgreplay cannot parse, or one with no statement, is bad input."""
    fmt = log_format(log)
    r = subprocess.run([pgreplay, "-f", *(["-c"] if fmt == "csv" else []), "-o", out, log],
                       capture_output=True, text=True, cwd="/", **run_as)
    if r.returncode != 0:
        mt = _PARSE_ERROR.search(r.stderr + r.stdout)
        why = f"line {mt.group(1)}: {mt.group(2)}" if mt else (r.stderr.strip()[-200:] or
                                                               f"exit {r.returncode}")
        raise InputError(f"--replay {log}: pgreplay cannot parse it ({why}); give a log "
                         "recorded with `hpadvise capture` (csvlog, or stderr with "
                         "log_line_prefix '%m|%u|%d|%c|')")
    mt = _PARSED.search(r.stdout)
    n = int(mt.group(1)) if mt else 0
    if n == 0:
        raise InputError(f"--replay {log}: the log holds no statement to replay (was "
                         "log_statement = 'all' while it was written?)")
    return n


class Replay:
    """The driver validate runs for `--replay`: one pgreplay of the whole log per run. Its
    runs are a fixed amount of work, not a fixed time: `seconds` only bounds the run. The
    statements write: each run needs the data as it was before the log (the runner resets
    the copies between runs: `resets`)."""

    resets = True

    def __init__(self, binary: str, replay_file: str, host: str, port: int, speed: float,
                 run_as: dict | None = None):
        self.binary, self.file, self.host, self.port = binary, replay_file, host, port
        self.speed, self.run_as = speed, run_as or {}
        self.last: ReplayStats | None = None

    def command(self) -> list[str]:
        return [self.binary, "-r", "-h", self.host, "-p", str(self.port), "-j", "-s",
                f"{self.speed:g}", self.file]

    def start(self, workload: str, clients: int, seconds: int, logprefix: str | None,
              warm_s: int = 0) -> subprocess.Popen:
        return subprocess.Popen(self.command(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd="/",
                                start_new_session=True, **self.run_as)

    @staticmethod
    def stream(proc):
        return proc.stderr  # "Execution is N seconds behind schedule" warnings

    @staticmethod
    def live_tps(line: str) -> float | None:
        return None  # pgreplay reports only at the end

    def finish(self, proc, logprefix: str | None, lines: list[str], warm_s: int = 0):
        from hpadvise.benchmarks.face import Run
        out, err = proc.communicate()
        if proc.returncode != 0:
            said = ("".join(lines) + (err or "")).strip().splitlines()
            raise RuntimeError(f"pgreplay failed (exit {proc.returncode}): "
                               f"{said[-1][:300] if said else ''}")
        try:
            s = self.last = parse_stats(out)
        except ValueError:
            said = ("".join(lines) + (err or "") + out).strip().splitlines()
            raise RuntimeError(f"pgreplay printed no replay statistics; it said: "
                               f"{' / '.join(said[-3:])[:300] or 'nothing'}") from None
        if s.error_pct > MAX_ERROR_PCT:
            raise ReplayMismatch(s)
        # no latencies: pgreplay reports statement durations in whole milliseconds at best
        return Run(s.statements / s.seconds if s.seconds > 0 else 0.0, None, None, None,
                   None, [], s.statements, s.errors)


class ReplayMismatch(InputError):
    """More of the replayed statements failed than MAX_ERROR_PCT: the data is not the clone
    the log needs (or the statements depend on something the copy lacks)."""

    def __init__(self, s: ReplayStats):
        self.stats = s
        super().__init__(f"{s.errors} of {s.statements} replayed statements ({s.error_pct:.1f}%) "
                         f"failed, more than {MAX_ERROR_PCT:g}%: the data is not what the "
                         "log ran on; replay a capture with its own base backup (`hpadvise "
                         "capture`), or copy the instance from before the log began")


def log_span(path: str) -> float | None:
    """Seconds between the log's first and last timestamps (both formats begin each record
    with %m, the time in milliseconds), or None where they cannot be read."""
    from datetime import datetime
    stamp = re.compile(rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)", re.M)
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
            f.seek(max(0, os.path.getsize(path) - (1 << 20)))
            tail = f.read()
    except OSError:
        return None
    first, last = stamp.search(head), list(stamp.finditer(tail))
    if not first or not last:
        return None
    t0, t1 = (datetime.fromisoformat(m.group(1).decode()) for m in (first, last[-1]))
    return (t1 - t0).total_seconds()


def driver_for(opts, cluster, source) -> Replay:
    """The Replay driver for a scratch copy: the log (a capture directory's, or the file
    given) parsed once into a replay file of its own in the copy's directory (root's alone:
    it holds the statements)."""
    import shutil
    from hpadvise.benchmarks.face import need_binary
    log = source.capture["log"] if source.capture else opts.replay
    binary = need_binary(shutil.which("pgreplay"), "pgreplay", "pgreplay")
    out = os.path.join(cluster.tmp, "statements.replay")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    statements = parse_log(binary, log, out, {})
    d = Replay(binary, out, cluster.tmp, cluster.port, opts.replay_speed or REPLAY_FASTEST)
    d.statements, d.span_s, d.log = statements, log_span(log), log
    return d
