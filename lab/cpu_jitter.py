#!/usr/bin/env python3
"""How steady are this machine's CPUs from second to second, with no database at all? One
process pinned to each CPU counts the turns of a tight loop it makes in each second, for
SECONDS, both at once (as validate's two servers run side by side, one on each CPU); then
the spread of each CPU's count from second to second, and of the log ratio of the two
(CPU 1 over CPU 0), the analogue of a side-by-side run's per-second ratio.

    python3 lab/cpu_jitter.py SECONDS [OUT.json]

A machine whose CPUs alone move 1% from second to second cannot give two servers' per-second
ratios a spread below that. The loop touches no memory beyond one cache line: what moves its
count is the time the CPU is given (the hypervisor, interrupts, other tasks), not the caches
or memory. Standard library only; run as any user, on a machine otherwise quiet."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import time


def count(cpu: int, seconds: int, start: float, out) -> None:
    os.sched_setaffinity(0, {cpu})
    while time.time() < start:
        pass
    counts, ran, waited, stolen = [], [], [], []
    edge = start + 1
    n = 0
    sched0, steal0 = schedstat(), steal(cpu)
    while len(counts) < seconds:
        for _ in range(2000):  # the clock read once every 2,000 turns
            n += 1
        if time.time() >= edge:
            sched, st = schedstat(), steal(cpu)
            counts.append(n)
            ran.append((sched[0] - sched0[0]) / 1e9)
            waited.append((sched[1] - sched0[1]) / 1e9)
            stolen.append((st - steal0) / os.sysconf("SC_CLK_TCK"))
            sched0, steal0 = sched, st
            n = 0
            edge += 1
    out.put((cpu, {"counts": counts, "ran_s": ran, "waited_s": waited, "steal_s": stolen}))


def schedstat() -> tuple[int, int]:
    """This process's time on a CPU and time waiting for one, in ns (the kernel's
    Documentation/scheduler/sched-stats.rst, /proc/<pid>/schedstat)."""
    on, wait, _ = open("/proc/self/schedstat").read().split()
    return int(on), int(wait)


def steal(cpu: int) -> int:
    """The CPU's steal time in clock ticks: what the hypervisor ran elsewhere while this
    virtual CPU wanted to run (proc(5), /proc/stat, the eighth column)."""
    for line in open("/proc/stat"):
        if line.startswith(f"cpu{cpu} "):
            return int(line.split()[8])
    return 0


def main() -> None:
    seconds = int(sys.argv[1])
    cpus = sorted(os.sched_getaffinity(0))[:2]
    q: mp.Queue = mp.Queue()
    start = time.time() + 0.5
    ps = [mp.Process(target=count, args=(c, seconds, start, q)) for c in cpus]
    for p in ps:
        p.start()
    got = dict(q.get() for _ in ps)
    for p in ps:
        p.join()
    rows = {}
    for c in cpus:
        n = got[c]["counts"]
        ln = [math.log(x) for x in n]
        rate = [x / r for x, r in zip(n, got[c]["ran_s"])]  # turns per second on the CPU
        rows[f"cpu{c}"] = {"mean": statistics.mean(n), "sd_pct": 100 * statistics.stdev(ln),
                           "min_pct": 100 * (min(n) / statistics.median(n) - 1),
                           "ran_min_s": min(got[c]["ran_s"]),
                           "waited_max_s": max(got[c]["waited_s"]),
                           "steal_sum_s": sum(got[c]["steal_s"]),
                           "rate_sd_pct": 100 * statistics.stdev(math.log(x) for x in rate)}
    if len(cpus) == 2:
        lr = [math.log(b / a) for a, b in zip(got[cpus[0]]["counts"], got[cpus[1]]["counts"])]
        rows["ratio"] = {"mean_pct": 100 * statistics.mean(lr), "sd_pct": 100 * statistics.stdev(lr)}
    for k, v in rows.items():
        print(k, " ".join(f"{a} {b:,.2f}" for a, b in v.items()))
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump({"t": start, "seconds": seconds, "counts": got, "summary": rows}, f)


if __name__ == "__main__":
    main()
