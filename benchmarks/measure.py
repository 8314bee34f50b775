"""Measuring: one benchmark invocation per server, all at once, with what the host shows
around it (each server's page tables, THP counters, CPU steal, dTLB counters where a PMU
exists), the CPU trades of the simultaneous design, and a deadline per run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from hpadvise.api.face import Proc, ProcTable, read_meminfo, SysRoot
from hpadvise.act.face import (dtlb_events, parse_knob, parse_perf_csv, read_cpu_times,
                               read_vmstat, redact_args, thp_file)

from .cpus import start_pinned, trade, turn
from .drivers import resets
from .speed import Probe, probed, run_speeds


@dataclass
class State:
    """What the live display shows."""
    phase: str = "starting"
    variant: str = ""
    block: int = 0
    started: float = field(default_factory=time.time)
    budget_s: int = 0
    live_tps: float | None = None
    last_run: str = ""   # the latest finished run, for plain progress lines

    @property
    def elapsed(self) -> float:
        return time.time() - self.started


class Interrupted(BaseException):
    """SIGTERM, raised where it lands; a BaseException, as KeyboardInterrupt is, so that no
    `except Exception` keeping a rollback going (journal.rollback, PgSetting.set) swallows it."""


class RunOverrun(Exception):
    """A benchmark run did not end in its time (warm-up + run + Options.run_grace_s): its
    clients are stopped and validate ends with what the runs before it measured."""


@dataclass
class Sample:
    block: int
    variant: str
    tps: float
    latency_avg_ms: float | None
    p50_ms: float
    p95_ms: float
    p99_ms: float
    page_tables_kb: int | None  # the server's own (VmPTE summed; PageTables if unreadable)
    anon_huge_kb: int | None
    shmem_huge_kb: int | None
    hugetlb_kb: int | None
    backing: str | None
    thp_deltas: dict[str, int]
    progress: list = field(default_factory=list)
    started: float | None = None     # epoch seconds when the benchmark started (warm-up incl.)
    steal_pct: float | None = None   # CPU steal during the measured part (VMs; /proc/stat)
    dtlb: dict | None = None  # perf stat's dTLB counters over the measured part (a PMU only)
    epoch: int | None = None  # the servers' start this run belongs to (= block when restarting)
    cpus: list[int] | None = None  # CPUs the server and its clients were pinned to
    server: int | None = None  # side by side: 0 the server the data was loaded into, 1.. copies
    # simultaneous: the CPU trades within the run (warm-up included) that took, read back off
    # the server's main process and its driver
    trades: int | None = None
    # side by side with THP phases: the THP variant whose setting the host had (variants.py)
    phase: str | None = None
    # THP enabled and shmem_enabled as read while the run was measured
    thp_modes: dict | None = None
    # the work of the measured part (transactions, or a replay's statements) and how much of
    # it failed (a replay's statements with an error; None where the driver does not say)
    work: int | None = None
    errors: int | None = None
    # the geometric mean speed (loop turns per microsecond) of the CPUs the run sat on while it
    # measured, read by speed.Probe; None where nothing was probed
    cpu_speed: float | None = None

    @classmethod
    def of(cls, row: dict) -> "Sample":
        """A sample from a result's JSON row; keys it does not know (a row some other
        version wrote) left out."""
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in row.items() if k in known})


def meminfo(sr: SysRoot) -> dict:
    """What the host's memory shows during a run, and the THP modes in force."""
    m = read_meminfo(sr)
    return {"page_tables_kb": m.page_tables_kb, "anon_huge_kb": m.anon_huge_kb,
            "shmem_huge_kb": m.shmem_huge_kb, "hugetlb_kb": m.hugetlb_kb,
            "thp_modes": thp_modes(sr)}


def server_page_tables_kb(sr: SysRoot, pids: list[int | None]) -> list[int | None]:
    """Each server's own page tables: VmPTE (Documentation/filesystems/proc.rst) summed over its
    main process and its children, as check counts an instance's. PageTables in /proc/meminfo
    is host-wide and cannot tell apart servers measured at the same time."""
    table = ProcTable(sr)
    out: list[int | None] = []
    for pid in pids:
        ptes = [p.vm_pte_kb for p in [Proc(sr, pid), *table.children(pid)]] if pid else []
        ptes = [kb for kb in ptes if kb is not None]
        out.append(sum(ptes) if ptes else None)
    return out


def steal_pct(before: dict | None, after: dict | None) -> float | None:
    """Share of CPU time the hypervisor gave to others between two /proc/stat readings: a run
    with much steal measured the neighbours as much as the variant."""
    if not before or not after:
        return None
    total = sum(after.values()) - sum(before.values())
    return round(100 * (after["steal"] - before["steal"]) / total, 1) if total > 0 else None


def thp_modes(sr: SysRoot) -> dict[str, str | None]:
    """The THP modes in force (the bracketed word of each knob, transhuge.rst)."""
    return {k: parse_knob(sr.read(thp_file(k), quiet_missing=True)).value
            for k in ("enabled", "shmem_enabled")}


def thp_counters(sr: SysRoot) -> dict[str, int]:
    return {k: v for k, v in read_vmstat(sr).items() if k.startswith("thp_")}


def kill_all(procs: list[subprocess.Popen], wait_s: float = 10) -> None:
    """Every client's process group ended: SIGTERM, and SIGKILL where it has not ended within
    wait_s (a client stopped with SIGSTOP held SIGTERM pending here, one that ignores it
    stays; SIGKILL ends both)."""
    def signal_group(p: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
    for p in procs:
        signal_group(p, signal.SIGTERM)
        try:
            p.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            signal_group(p, signal.SIGKILL)
            p.wait()


def run_clients(o, sr: SysRoot, pmu: str, jobs, clients: int, pids: list[int | None],
                update: Callable[..., None], probe_speed: bool = True):
    """One benchmark invocation per (driver, logprefix, cpus), all at once: warm_s seconds
    of warm-up that the drivers leave out of their figures, then the measured seconds. The
    -P/--report-interval lines feed the live display; /proc/meminfo and each server's page
    tables (pids: its main process) are sampled while the clients are connected (page
    tables exist only while backends map the memory) and the
    thp_* counters, CPU steal and dTLB counters around the measured part (host-wide: with
    servers side by side they cover all of them), and the speed of the CPUs each run sat on
    over the measured part (speed.py). `o` is validate's Options. Returns the runs, the
    memory and page tables seen, THP counter deltas, steal, dTLB counters, the CPU trades
    that took, each client's command line (secrets redacted) and each run's CPU speed
    (probe_speed: False where the runs' figures are thrown away)."""
    warm_s, seconds = o.warm_s, o.run_s
    procs = []
    try:
        for drv, logprefix, cpus in jobs:
            procs.append(start_pinned(lambda: drv.start(
                o.workload, clients, seconds, logprefix, warm_s), cpus))
    except BaseException:
        kill_all(procs)
        raise
    t0 = time.time()
    update(phase="warm-up")
    lines: list[list[str]] = [[] for _ in procs]
    live: list[float] = [0.0 for _ in procs]
    streams = [drv.stream(p) for (drv, _, _), p in zip(jobs, procs)]

    def follow(i: int) -> None:
        drv = jobs[i][0]
        for line in streams[i]:
            lines[i].append(line)
            tps = drv.live_tps(line)
            if tps is not None:
                live[i] = tps
                update(live_tps=sum(live))
    threads = [threading.Thread(target=follow, args=(i,), daemon=True)
               for i in range(len(procs))]
    for th in threads:
        th.start()
    groups = [cpus for _, _, cpus in jobs]
    swap = o.swap_s if len(jobs) > 1 and None not in groups + pids else 0
    turned = 0
    trades: list[int | None] = [0 if swap else None] * len(procs)
    mem: dict = {}
    ptes: list[int | None] = [None] * len(pids)
    before: dict | None = None
    cpu0 = None
    perf = None
    limit = warm_s + seconds + o.run_grace_s
    # a timed run's clients end with its measured part: no trade at or past its end, where
    # one moves nothing measured and races the clients' exit (in validate's recorded runs
    # it failed in five of eight, while every trade before it took: lab/README.md, "Eight
    # evictions and four re-copies in one run"); a fixed amount of work (a replay) is
    # measured to its end, whenever that comes, and trades to it
    trade_end = limit if any(resets(drv) for drv, _, _ in jobs) else warm_s + seconds
    probe: Probe | None = None
    try:
        # started with the warm-up, so that its own start (a few milliseconds) falls before
        # the measured part wherever there is a warm-up
        probe = Probe(limit, probed(groups)) if probe_speed else None
        while any(p.poll() is None for p in procs):
            now = time.time() - t0
            if now > limit:
                raise RunOverrun(f"was still going {now:.0f} s after it started, "
                                 f"{now - warm_s - seconds:.0f} s past its {warm_s} s of "
                                 f"warm-up and {seconds} s of measuring (a server that "
                                 "stopped making progress?)")
            if swap and now < trade_end and (k := turn(now, warm_s, swap)) != turned:
                turned = k
                for i, took in enumerate(trade(sr, groups, pids, [p.pid for p in procs], k)):
                    trades[i] += took
            if before is None and now >= warm_s:
                before = thp_counters(sr)
                cpu0 = read_cpu_times(sr)
                perf = perf_start(pmu, seconds)
                update(phase="measuring")
            if not mem and now >= warm_s + seconds * 0.8:
                mem = meminfo(sr)
                ptes = server_page_tables_kb(sr, pids)
            time.sleep(0.1)
    except BaseException:
        kill_all(procs)
        if probe is not None:
            probe.finish()
        raise
    speeds = run_speeds(probe.finish() if probe else {}, groups, t0, warm_s, seconds, swap)
    runs = []
    for i, ((drv, logprefix, _), p) in enumerate(zip(jobs, procs)):
        threads[i].join(timeout=5)
        if streams[i] is p.stderr:
            p.stderr = None  # already consumed by follow()
        else:
            p.stdout = None
        runs.append(drv.finish(p, logprefix, lines[i], warm_s))
    after = thp_counters(sr)
    steal = steal_pct(cpu0, read_cpu_times(sr))
    before = before or after
    thp = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    return (runs, mem or meminfo(sr), ptes, thp, steal, perf_finish(perf),
            trades, [list(redact_args(p.args)) for p in procs], speeds)


def perf_start(pmu: str, seconds: int):
    """dTLB counters over the measured part, host-wide (`perf stat -a`: the server's
    backends come and go), where the kernel exposes a CPU PMU; None elsewhere."""
    if pmu != "present" or not shutil.which("perf"):
        return None
    out = tempfile.NamedTemporaryFile(prefix="hpadvise-perf-", suffix=".csv", delete=False)
    out.close()
    p = subprocess.Popen(["perf", "stat", "-x,", "-a", "-o", out.name, "-e",
                          ",".join(dtlb_events()), "--", "sleep", str(seconds)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p, out.name


def perf_finish(perf) -> dict | None:
    if perf is None:
        return None
    p, path = perf
    try:
        p.wait(timeout=30)
        with open(path, errors="replace") as f:
            return parse_perf_csv(f.read())
    except (OSError, subprocess.TimeoutExpired):
        p.kill()
        return None
    finally:
        os.unlink(path)
