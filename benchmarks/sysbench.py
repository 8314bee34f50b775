"""sysbench driver for hpadvise's own TPC-C workload (benchmarks/tpcc/tpcc.lua), on the mysql
and pgsql drivers of sysbench 1.0.x, and parsers of its output.

sysbench prints everything on stdout: `[ Ns ] thds: .. tps: X ... lat (ms,95%): Y err/s Z`
per --report-interval, then the summary (`transactions: N (X per sec.)`, `Latency (ms):`
with avg and one percentile). With --histogram=on it adds a latency histogram, one
`value |*** count` line per bucket; p50/p95/p99 come from its cumulative counts
(docs/reference.md, sysbench 1.0.20).
"""

from __future__ import annotations

import os
import re
import subprocess
from importlib.resources import files

from .pgbench import Run

LUA = str(files("hpadvise.benchmarks") / "tpcc" / "tpcc.lua")

_TPS = re.compile(r"^\s*transactions:\s+(\d+)\s+\(([\d.]+) per sec\.\)", re.M)
_AVG = re.compile(r"^\s*avg:\s+([\d.]+)", re.M)
_PROGRESS = re.compile(r"^\[ (\d+)s \] thds: \d+ tps: ([\d.]+) .*?lat \(ms,\d+%\): ([\d.]+)",
                       re.M)
_HIST = re.compile(r"^\s*([\d.]+) \|\**\s+(\d+)\s*$", re.M)


def parse_summary(out: str) -> tuple[int, float, float | None]:
    mt = _TPS.search(out)
    if not mt:
        raise ValueError("no 'transactions:' line in sysbench output")
    avg = _AVG.search(out)
    return int(mt.group(1)), float(mt.group(2)), float(avg.group(1)) if avg else None


def parse_progress(out: str) -> list[tuple[float, float, float]]:
    """(seconds, tps, latency ms at the reported percentile) per --report-interval."""
    return [(float(a), float(b), float(c)) for a, b, c in _PROGRESS.findall(out)]


def parse_histogram(out: str) -> list[tuple[float, int]]:
    return [(float(v), int(n)) for v, n in _HIST.findall(out)]


def hist_percentile(hist: list[tuple[float, int]], pct: float) -> float:
    """The smallest bucket value with at least pct% of the events at or below it."""
    total = sum(n for _, n in hist)
    if not total:
        return float("nan")
    need = total * pct / 100
    seen = 0
    for value, n in sorted(hist):
        seen += n
        if seen >= need:
            return value
    return sorted(hist)[-1][0]


class Sysbench:
    """sysbench with the TPC-C script against one server. `conn` holds the driver options:
    {"driver": "mysql", "socket": ..., "user": ..., "db": ...} or
    {"driver": "pgsql", "host": socket dir, "port": ..., "user": ..., "db": ...}."""

    def __init__(self, conn: dict, scale: int = 1, tables: int = 1, binary: str = "sysbench",
                 script: str | None = None):
        self.conn, self.scale, self.tables, self.binary = conn, scale, tables, binary
        # a user's Lua script (--script) instead of ours: run with the connection options
        # only (sysbench refuses options a script does not declare), prepared by its own
        # `prepare` command where the data is generated
        self.script = script

    def _base(self) -> list[str]:
        c = self.conn
        if c["driver"] == "mysql":
            opts = ["--db-driver=mysql", f"--mysql-socket={c['socket']}",
                    f"--mysql-user={c['user']}", f"--mysql-db={c['db']}"]
        else:
            opts = ["--db-driver=pgsql", f"--pgsql-host={c['host']}", f"--pgsql-port={c['port']}",
                    f"--pgsql-user={c['user']}", f"--pgsql-db={c['db']}"]
        if self.script:
            return [self.binary, self.script, *opts]
        return [self.binary, LUA, *opts, f"--scale={self.scale}", f"--tables={self.tables}"]

    def _cmd(self, command: str, threads: int = 1, extra: list[str] | None = None,
             timeout: float | None = None) -> subprocess.CompletedProcess:
        r = subprocess.run(self._base() + [f"--threads={threads}", *(extra or []), command],
                           capture_output=True, text=True, cwd="/", timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"sysbench {self.script or 'tpcc'} {command} failed: "
                               f"{_why(r.stdout + r.stderr)}")
        return r

    def prepare(self) -> None:
        try:
            self._cmd("prepare", threads=min(self.tables, os.cpu_count() or 1))
        except RuntimeError as exc:
            # a user's script needs no prepare of its own: sysbench says "... does not
            # implement the 'prepare' command" (sysbench 1.0.20) and the run uses the data
            # as it is
            if not self.script:
                raise
            if "does not implement the 'prepare'" not in str(exc):  # the user's script
                from hpadvise.api.face import InputError
                raise InputError(f"--script {os.path.basename(self.script)}: {exc}; fix "
                                 "the script (sysbench runs Lua scripts)") from None

    def trial(self, seconds: float) -> None:
        """One event of a user's script on one thread: a script that fails on this data, or
        whose event does not end within `seconds` (a run's deadline), is bad input, said
        before anything is measured."""
        from hpadvise.api.face import InputError
        try:
            self._cmd("run", threads=1, extra=["--events=1", "--time=0"], timeout=seconds)
        except subprocess.TimeoutExpired:
            raise InputError(f"--script {os.path.basename(self.script or LUA)}: one event of "
                             f"it on one thread did not end within {seconds:.0f} s (a run's "
                             "warm-up, measured seconds and grace): give a shorter "
                             "script") from None
        except RuntimeError as exc:
            raise InputError(f"--script {os.path.basename(self.script or LUA)}: {exc}; fix "
                             "the script") from None

    def check(self) -> str:
        return self._cmd("check").stdout

    def cleanup(self) -> None:
        self._cmd("cleanup")

    def command(self, clients: int, seconds: int, warm_s: int = 0) -> list[str]:
        # sysbench 1.0 has no --warmup-time; a report checkpoint at the end of the warm-up
        # prints the statistics so far and resets every counter (histogram included), so the
        # final report covers the measured part only (sysbench --help, --report-checkpoints)
        warm = [f"--report-checkpoints={warm_s}"] if warm_s else []
        return self._base() + [f"--threads={clients}", f"--time={warm_s + seconds}", *warm,
                               "--report-interval=1", "--histogram=on", "--percentile=95", "run"]

    def start(self, workload: str, clients: int, seconds: int, logprefix: str | None,
              warm_s: int = 0):
        return subprocess.Popen(self.command(clients, seconds, warm_s), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd="/",
                                start_new_session=True)

    @staticmethod
    def stream(proc):
        return proc.stdout

    @staticmethod
    def live_tps(line: str) -> float | None:
        mt = _PROGRESS.match(line)
        return float(mt.group(2)) if mt else None

    @staticmethod
    def finish(proc: subprocess.Popen, logprefix: str | None, lines: list[str],
               warm_s: int = 0) -> Run:
        rest, _ = proc.communicate()
        out = "".join(lines) + (rest or "")
        if proc.returncode != 0:
            raise RuntimeError(f"sysbench run failed (exit {proc.returncode}): {_why(out)}")
        final = final_report(out)
        n, tps, avg = parse_summary(final)
        hist = parse_histogram(final)
        return Run(tps, avg, hist_percentile(hist, 50), hist_percentile(hist, 95),
                   hist_percentile(hist, 99), parse_progress(out), n)


def final_report(out: str) -> str:
    """The report printed at the end of the run: everything after the last progress line
    (a --report-checkpoints report comes earlier, between progress lines)."""
    last = None
    for last in _PROGRESS.finditer(out):
        pass
    return out[last.end():] if last else out


def _why(out: str) -> str:
    """The lines that say what went wrong: our script's 'tpcc:' message or sysbench's FATAL
    lines. sysbench prints the driver's reason first ("FATAL: unable to connect to MySQL
    server ...", "FATAL: error 1040: Too many connections") and its generic
    "`thread_run' function failed" last: every distinct one is kept, in order."""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    for pat in ("tpcc:", "FATAL", "error", "Error"):
        hits = list(dict.fromkeys(ln for ln in lines if pat in ln))
        if hits:
            return "; ".join(ln[:300] for ln in hits[:4])
    return (lines[-1] if lines else "no output")[:300]
