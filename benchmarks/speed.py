"""The CPUs' own speed while a run measures: a probe on each CPU (up to PER_GROUP of each
group) times a fixed loop every 50 ms, and each run gets the speed of the CPUs it sat on
(its placement over the run, the trades of the simultaneous design included), the covariate
stats.paired_effect adjusts the effect for.

Why: a VM's virtual CPUs do not run at one speed. Here, with no database running, a loop
pinned to each of the two CPUs made 4-17% more or fewer turns from one second to the next
(sd), down to 45% fewer for seconds at a time, and the two CPUs' means differed by up to 19%
over a minute, while the kernel counted no steal; in a side-by-side A/A the log ratio of the
two servers' TPS followed the log ratio of their CPUs' speeds second by second (correlation
0.73) and epoch by epoch (0.87, slope 0.92), and the adjustment halved the effect's standard
error (lab/README.md, "The CPUs' own speed as a covariate").

The probe runs at real-time priority (SCHED_FIFO, sched(7)) so that no server process delays
the loop it times: its reading is the CPU's speed, not the share the servers leave it. It
takes about 1 ms in 50 (2%) of every CPU it probes, the same on each. Where real-time
priority is refused to any probe (no CAP_SYS_NICE; a cgroup without real-time time), that
probe ends at once, no reading of any CPU is kept (speeds read at two priorities would not
compare), runs carry no speed, and the effect is not adjusted.

The run's CPUs are taken from the trading schedule (cpus.turn), not from what each trade
read back: a trade that failed (counted in the run's `trades`) is rare and costs the
covariate a few seconds on the wrong group."""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time

from .cpus import ALL_CPUS, turn

EVERY_S = 0.05
# loop turns timed per reading: about 1 ms of CPython's loop on the CPUs measured (25-55
# turns per microsecond); only ratios between readings matter, so the count is fixed
TURNS = 40_000
# CPUs probed in each group at most, spread through it: a probe process keeps about 7 MB of
# its own (Private_Dirty of one `python -I` probe, measured with CPython 3.11), so a probe on
# every CPU of a 128-CPU host would hold about 0.9 GB; a group's speed is the mean of its
# probed CPUs, and the servers' own throughput averages over many CPUs where a group is large
PER_GROUP = 4

# Run by the interpreter that runs validate, one per CPU, in isolated mode (-I: no site, no
# user paths): pinned, at real-time priority, a reading per line ("t ns") into a file of its
# own (a pipe would fill in a long run and stop it) until killed, until its deadline, or until
# validate is gone (killed itself: the probe's parent changes). Exit 3 where the priority is
# refused.
PROBE = """
import os, sys, time
cpu, every, turns, until = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
parent = os.getppid()
os.sched_setaffinity(0, {cpu})
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
except OSError:
    sys.exit(3)
w = sys.stdout
while time.time() < until and os.getppid() == parent:
    t = time.time()
    a = time.perf_counter_ns()
    for _ in range(turns):
        pass
    w.write(f"{t:.4f} {time.perf_counter_ns() - a}\\n")
    w.flush()
    time.sleep(every)
"""


class Probe:
    """One reading process per CPU, started with a run's warm-up and stopped after the run."""

    def __init__(self, seconds: float, cpus: list[int] | None = None) -> None:
        """Readings for `seconds` at most (the warm-up, the measured part and its grace) on
        `cpus` (default: every CPU we may use; see probed)."""
        until = str(time.time() + seconds)
        self.files = {c: tempfile.TemporaryFile(prefix="hpadvise-speed-")
                      for c in (ALL_CPUS if cpus is None else cpus)}
        self.procs = {c: subprocess.Popen([sys.executable, "-I", "-c", PROBE, str(c),
                                           str(EVERY_S), str(TURNS), until],
                                          stdout=self.files[c], stderr=subprocess.DEVNULL,
                                          cwd="/")
                      for c in self.files}

    def finish(self) -> dict[int, list[tuple[float, float]]]:
        """Every CPU's readings, (time, ln turns per microsecond); none at all where any
        CPU's probe was refused its priority (its speeds would not compare with the
        others')."""
        out: dict[int, list[tuple[float, float]]] = {}
        for p in self.procs.values():
            p.kill()
        for c, p in self.procs.items():
            p.wait()
            f = self.files[c]
            f.seek(0)
            text = f.read().decode(errors="replace")
            f.close()
            out[c] = [(float(t), math.log(1000 * TURNS / int(ns)))
                      for t, ns in (ln.split() for ln in text.splitlines() if ln.count(" ") == 1)
                      if ns.isdigit() and int(ns) > 0]
        refused = any(p.returncode == 3 for p in self.procs.values())
        return {} if refused else out


def spread(cpus: list[int], k: int) -> list[int]:
    """k of `cpus` at even steps through the list (all of them where there are no more)."""
    if len(cpus) <= k:
        return list(cpus)
    return [cpus[int(i * len(cpus) / k)] for i in range(k)]


def probed(groups: list) -> list[int]:
    """The CPUs to probe for runs placed on `groups` (None: a run not pinned, on any CPU):
    PER_GROUP of each group, or as many of all our CPUs in all where any run is not pinned."""
    if not groups or None in groups:
        return spread(ALL_CPUS, PER_GROUP * max(1, len(groups)))
    return sorted({c for g in groups for c in spread(sorted(g), PER_GROUP)})


def run_speeds(readings: dict[int, list[tuple[float, float]]], groups: list, t0: float,
               warm_s: float, seconds: float, swap_s: float) -> list[float | None]:
    """Each run's speed: the geometric mean, in loop turns per microsecond, of the readings
    taken during its measured part on the CPUs it sat on at that moment (group i, or group
    (i + k) mod n after the k-th trade: cpus.trade; every CPU where it was not pinned); None
    where no reading fell there."""
    out: list[float | None] = []
    for i, g in enumerate(groups):
        vals = []
        for cpu, rs in readings.items():
            for t, v in rs:
                now = t - t0
                if not warm_s <= now <= warm_s + seconds:
                    continue
                on = groups[(i + turn(now, warm_s, swap_s)) % len(groups)] if swap_s else g
                if on is None or cpu in on:
                    vals.append(v)
        out.append(round(math.exp(sum(vals) / len(vals)), 4) if vals else None)
    return out
