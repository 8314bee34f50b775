"""pgbench driver and output parsers (pgbench 15; tolerant of older formats).

pgbench prints its summary on stdout and -P progress on stderr. Without -P, -L or -R the
latency average is derived from TPS, not measured, so runs always pass -P. pgbench has no
percentile option: percentiles come from the -l per-transaction logs, whose third column is
the transaction's latency in microseconds and whose fifth and sixth are the completion time in
epoch seconds and microseconds (PostgreSQL docs, pgbench, "Per-Transaction Logging").

A run's warm-up happens in the same pgbench invocation as its measurement: the backends that
warmed up (with 4 KiB pages, each one faults the shared buffers into its own page tables) are
the ones measured. TPS is the mean of the -P intervals after the warm-up, and percentiles use
the logged transactions that completed after it.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from dataclasses import dataclass, field

from .stats import percentile


@dataclass
class Summary:
    tps: float
    transactions: int | None
    failed: int | None
    latency_avg_ms: float | None
    latency_stddev_ms: float | None


def parse_summary(stdout: str) -> Summary:
    tps = None
    # PG >= 14: "tps = X (without initial connection time)"; older versions print two lines,
    # "(including connections establishing)" and "(excluding connections establishing)".
    for mt in re.finditer(r"^tps = ([\d.]+) \(([^)]*)\)", stdout, re.M):
        if tps is None or "without" in mt.group(2) or "excluding" in mt.group(2):
            tps = float(mt.group(1))
    if tps is None:
        raise ValueError("no 'tps =' line in pgbench output")

    def num(pattern: str, conv=float):
        mt = re.search(pattern, stdout, re.M)
        return conv(mt.group(1)) if mt else None

    return Summary(tps, num(r"^number of transactions actually processed: (\d+)", int),
                   num(r"^number of failed transactions: (\d+)", int),
                   num(r"^latency average = ([\d.]+) ms"), num(r"^latency stddev = ([\d.]+) ms"))


_PROGRESS = re.compile(r"^progress: ([\d.]+) s, ([\d.]+) tps, lat ([\d.]+) ms", re.M)


_LOADED = re.compile(r"(\d+) of (\d+) tuples \((\d+)%\) done \(elapsed ([\d.]+) s, "
                     r"remaining ([\d.]+) s\)")


def load_step(line: str) -> str | None:
    """One line of pgbench -i's progress as a step to show: a bar of the rows generated, or
    the step after them."""
    mt = _LOADED.search(line)
    if mt:
        pct = int(mt.group(3))
        bar = "#" * (pct // 5) + "." * (20 - pct // 5)
        return (f"[{bar}] {pct}% of {int(mt.group(2)):,} rows, {float(mt.group(4)):.0f} s, "
                f"~{float(mt.group(5)):.0f} s left")
    for word, step in (("vacuuming", "vacuuming the tables"),
                       ("creating primary keys", "building the primary keys")):
        if line.startswith(word):
            return step
    return None


def parse_progress(stderr: str) -> list[tuple[float, float, float]]:
    """(seconds, tps, latency ms) per -P interval."""
    return [(float(a), float(b), float(c)) for a, b, c in _PROGRESS.findall(stderr)]


def parse_log_latencies_us(paths: list[str], skip_s: float = 0) -> list[int]:
    """Latencies of the logged transactions; with skip_s, only those that completed more than
    skip_s seconds after the first logged one (the warm-up is left out)."""
    rows = []  # (completion time, latency us); every log line has these six columns
    for p in paths:
        with open(p) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[2].isdigit():
                    rows.append((int(parts[4]) + int(parts[5]) / 1e6, int(parts[2])))
    if not skip_s or not rows:
        return [lat for _, lat in rows]
    # the first completion is at most one transaction after the start
    since = min(t for t, _ in rows) + skip_s
    return [lat for t, lat in rows if t >= since]


def steady(progress: list[tuple[float, float, float]], warm_s: float):
    """(tps, latency ms) over the -P intervals that ended after the warm-up: every interval
    is one second long, so the mean of their TPS is transactions / time; the latency is
    weighted by each interval's transactions."""
    after = [p for p in progress if p[0] > warm_s]
    if not after:
        return None
    tps = sum(p[1] for p in after) / len(after)
    lat = sum(p[1] * p[2] for p in after) / sum(p[1] for p in after) if tps > 0 else None
    return tps, lat


@dataclass
class Run:
    tps: float
    latency_avg_ms: float | None
    p50_ms: float
    p95_ms: float
    p99_ms: float
    progress: list[tuple[float, float, float]] = field(default_factory=list)
    transactions: int | None = None
    errors: int | None = None  # work that failed, where the driver counts it (a replay)


class Pgbench:
    def __init__(self, binary: str, host: str, port: int, user: str, dbname: str,
                 run_as: dict | None = None, script: str | None = None):
        self.binary, self.host, self.port, self.user, self.dbname = binary, host, port, user, dbname
        self.run_as = run_as or {}
        self.script = script  # a user's script (--script) instead of the built-in workload

    def _base(self) -> list[str]:
        return [self.binary, "-h", self.host, "-p", str(self.port), "-U", self.user]

    def trial(self, seconds: float) -> None:
        """One transaction of a user's script by one client (pgbench -t 1): a script that
        fails on this data is bad input, said before anything is measured; so is one whose
        transaction does not end within `seconds` (a run's deadline: pgbench -T ends a run
        only between transactions, and it parses a long script slowly: a 40 MB script of
        200,000 SELECTs was still being parsed after 250 s here)."""
        from hpadvise.api.face import InputError
        try:
            r = subprocess.run(self._base() + ["-n", "-f", self.script, "-t", "1", "-c", "1",
                                               self.dbname], capture_output=True, text=True,
                               cwd="/", timeout=seconds, **self.run_as)
        except subprocess.TimeoutExpired:  # run() killed it
            raise InputError(f"--script {os.path.basename(self.script)}: one transaction of "
                             f"it on one client did not end within {seconds:.0f} s (a run's "
                             "warm-up, measured seconds and grace), so no run could end in "
                             "its time: give a shorter script (a transaction, not a "
                             "session)") from None
        said = [ln for ln in (r.stderr + r.stdout).splitlines()
                if "error" in ln.lower() or "fatal" in ln.lower()]
        if r.returncode != 0 or said:
            raise InputError(f"--script {os.path.basename(self.script)} fails on database "
                             f"{self.dbname}: {(said or ['exit %d' % r.returncode])[0][:300]}"
                             "; fix the script, or name its database with --database")

    def init(self, scale: int, progress=None) -> None:
        """Load the data as pgbench does by default: COPY of rows it generates, into tables
        created in the same transaction (so COPY FREEZE; the server's own generation, -I G,
        measured slower here: 65 s against 46 s at scale 409). With -q pgbench reports its
        progress every 5 s on stderr ("N of M tuples (P%) done (elapsed E s, remaining R
        s)", then "vacuuming...", "creating primary keys..."); `progress(text)` gets each
        step as it comes (pgbench docs, -i, --quiet)."""
        proc = subprocess.Popen(self._base() + ["-i", "-q", "-s", str(scale), self.dbname],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                cwd="/", **self.run_as)
        said = []
        for line in proc.stderr:
            said.append(line)
            step = load_step(line)
            if step and progress is not None:
                progress(step)
        if proc.wait() != 0:
            raise RuntimeError(f"pgbench -i failed: {''.join(said).strip()[-300:]}")

    def command(self, workload: str, clients: int, seconds: int, logprefix: str | None,
                warm_s: int = 0) -> list[str]:
        cmd = self._base() + ["-M", "prepared", "-c", str(clients),
                              "-j", str(min(clients, os.cpu_count() or 1)),
                              "-T", str(warm_s + seconds), "-P", "1"]
        if self.script:
            # -n: no vacuum of pgbench's own tables, which a user's data need not have
            # (pgbench docs, -f and -n)
            cmd += ["-n", "-f", self.script]
        elif workload == "select":
            cmd.append("-S")
        if logprefix:
            # a 1-in-10 sample of the transactions is plenty for p99 (select-only logs ~75k
            # lines a second here otherwise); pgbench docs, --sampling-rate
            cmd += ["-l", "--log-prefix", logprefix, "--sampling-rate", "0.1"]
        return cmd + [self.dbname]

    def start(self, workload: str, clients: int, seconds: int, logprefix: str | None,
              warm_s: int = 0):
        return subprocess.Popen(self.command(workload, clients, seconds, logprefix, warm_s),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd="/", start_new_session=True, **self.run_as)

    # the driver interface validate's runner uses (shared with sysbench.Sysbench)
    @staticmethod
    def stream(proc):
        return proc.stderr  # -P progress goes to stderr

    @staticmethod
    def live_tps(line: str) -> float | None:
        mt = _PROGRESS.match(line)
        return float(mt.group(2)) if mt else None

    @staticmethod
    def finish(proc, logprefix: str | None, lines: list[str], warm_s: int = 0) -> Run:
        return finish(proc, logprefix, lines, warm_s)


def finish(proc: subprocess.Popen, logprefix: str | None, stderr_lines: list[str],
           warm_s: float = 0) -> Run:
    out, err = proc.communicate()
    err = "".join(stderr_lines) + (err or "")
    if proc.returncode != 0:
        msg = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("progress:")]
        raise RuntimeError(f"pgbench failed (exit {proc.returncode}): "
                           f"{(msg[-1] if msg else '').strip()[:300]}")
    s = parse_summary(out)
    progress = parse_progress(err)
    tps, lat_avg, n = s.tps, s.latency_avg_ms, s.transactions
    if warm_s:
        st = steady(progress, warm_s)
        if st is None:
            raise RuntimeError(f"pgbench reported no progress after the {warm_s} s warm-up")
        tps, lat_avg = st
        n = round(sum(p[1] for p in progress if p[0] > warm_s))
    lat: list[int] = []
    if logprefix:
        logs = glob.glob(logprefix + ".*")
        lat = sorted(parse_log_latencies_us(logs, warm_s))
        for p in logs:
            os.unlink(p)
    ms = [x / 1000 for x in lat]
    return Run(tps, lat_avg, percentile(ms, 50), percentile(ms, 95),
               percentile(ms, 99), progress, n)
