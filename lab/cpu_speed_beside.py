#!/usr/bin/env python3
"""Does the speed of the CPU each server sits on explain a side-by-side run's ratios? A probe
pinned to each CPU wakes every 50 ms at real-time priority (SCHED_FIFO, so that no server
process delays it) and times a fixed loop of about a millisecond: the loop's rate is the
speed that CPU gave at that moment (2% of each CPU, the same on both). `read` then places each
server on its CPU second by second as validate's simultaneous design does (benchmarks/cpus.py:
server i on group (i + k) mod n after the k-th trade, trades on a grid of swap_s through the
end of the warm-up), and sets the per-second and per-epoch log ratios of the two servers
against the log ratio of the speeds of the CPUs they were on.

    python3 lab/cpu_speed_beside.py sample OUT.jsonl SECONDS &   # beside `validate --json --output RUN.json`
    python3 lab/cpu_speed_beside.py read RUN.json OUT.jsonl

`read` prints the correlations and what an adjustment for the covariate (ordinary least
squares of the epoch log ratio on the epoch's speed log ratio, the intercept as the effect:
analysis of covariance, with a covariate the treatment cannot move) would give against the
unadjusted mean, then validate's own statistics without and with the covariate. `sample` is
standard library only (and needs root for SCHED_FIFO); `read` runs beside hpadvise."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import time

from vmstat_during import samples_of

TURNS = 40_000  # about 1 ms of Python's loop on this machine's CPUs
EVERY = 0.05


def probe(cpu: int, seconds: float, out: str) -> None:
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    end = time.time() + seconds
    with open(out, "a") as f:
        while time.time() < end:
            t = time.time()
            a = time.perf_counter_ns()
            n = 0
            for _ in range(TURNS):
                n += 1
            ns = time.perf_counter_ns() - a
            f.write(json.dumps({"cpu": cpu, "t": t, "ns": ns}) + "\n")
            f.flush()
            time.sleep(EVERY)


def sample(out: str, seconds: float) -> None:
    open(out, "w").close()
    ps = [mp.Process(target=probe, args=(c, seconds, out)) for c in sorted(os.sched_getaffinity(0))]
    for p in ps:
        p.start()
    for p in ps:
        p.join()


def ols(x: list[float], y: list[float]) -> tuple[float, float, float]:
    """Intercept at the covariate's mean of zero, its standard error, and the slope."""
    n = len(x)
    mx, my = statistics.mean(x), statistics.mean(y)
    sxx = sum((a - mx) ** 2 for a in x)
    b = sum((a - mx) * (c - my) for a, c in zip(x, y)) / sxx
    a0 = my - b * mx
    res = [c - a0 - b * a for a, c in zip(x, y)]
    s2 = sum(r * r for r in res) / (n - 2)
    se = math.sqrt(s2 * (1 / n + mx * mx / sxx))
    return a0, se, b


def corr(x: list[float], y: list[float]) -> float:
    mx, my = statistics.mean(x), statistics.mean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    return sxy / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))


def read(run: str, samples: str) -> None:
    from hpadvise.benchmarks.cpus import turn
    r = json.load(open(run))
    m = r["meta"]
    warm, secs, swap = m["warm_s"], m["run_s"], m["swap_s"]
    pr: dict[int, list] = {}
    for s in samples_of(samples):
        pr.setdefault(s["cpu"], []).append((s["t"], TURNS / s["ns"]))
    cpus = sorted(pr)

    def speed(cpu: int, a: float, b: float) -> float | None:
        v = [x for t, x in pr[cpu] if a <= t < b]
        return statistics.mean(v) if v else None
    by: dict[int, dict] = {}
    for s in r["samples"]:
        by.setdefault(s["epoch"], {})[s["variant"]] = s
    names = m["variants"]
    ye, ze, ys, zs = [], [], [], []
    for ep in sorted(by):
        d = by[ep]
        if len(d) < 2 or d[names[0]].get("server") is None:
            continue
        a, b = d[names[0]], d[names[1]]
        t0 = min(a["started"], b["started"])
        num = den = 0.0
        za = zb = 0.0
        for sec in range(warm + 1, warm + secs + 1):  # pgbench's progress line at sec covers (sec-1, sec]
            k = turn(sec - 0.5, warm, swap)
            ca = cpus[(a["server"] + k) % len(cpus)]
            cb = cpus[(b["server"] + k) % len(cpus)]
            sa, sb = speed(ca, t0 + sec - 1, t0 + sec), speed(cb, t0 + sec - 1, t0 + sec)
            pa = {round(t): x for t, x, _ in a["progress"]}.get(sec)
            pb = {round(t): x for t, x, _ in b["progress"]}.get(sec)
            if None in (sa, sb, pa, pb) or not pa or not pb:
                continue
            ys.append(math.log(pb / pa))
            zs.append(math.log(sb / sa))
            num += math.log(pb / pa)
            za += math.log(sa)
            zb += math.log(sb)
            den += 1
        if den:
            ye.append(math.log(b["tps"] / a["tps"]))
            ze.append((zb - za) / den)
    print(f"seconds: {len(ys)}, corr(ln ratio, ln speed ratio) {corr(zs, ys):+.2f}; "
          f"sd ln ratio {100 * statistics.stdev(ys):.2f}%, sd ln speed ratio "
          f"{100 * statistics.stdev(zs):.2f}%")
    n = len(ye)
    mean, sd = statistics.mean(ye), statistics.stdev(ye)
    a0, se, b = ols(ze, ye)
    print(f"epochs: {n}, corr {corr(ze, ye):+.2f}, slope {b:.2f}")
    print(f"  unadjusted: {100 * mean:+.2f}%, se {100 * sd / math.sqrt(n):.2f}%")
    print(f"  adjusted (ANCOVA): {100 * a0:+.2f}%, se {100 * se:.2f}%")
    # as validate computes it: each run's speed placed by speed.run_speeds, then
    # stats.comparisons without and with it
    from hpadvise.benchmarks import measure, speed as sp, stats
    from hpadvise.benchmarks.variants import pairs_for
    readings = {c: [(t, math.log(x)) for t, x in v] for c, v in pr.items()}
    plain, probed = [], []
    for ep in sorted(by):
        runs = list(by[ep].values())
        groups = [s["cpus"] for s in runs]
        t0 = min(s["started"] for s in runs)
        speeds = sp.run_speeds(readings, groups, t0, warm, secs, swap)
        for s, v in zip(runs, speeds):
            plain.append(measure.Sample.of({**s, "cpu_speed": None}))
            probed.append(measure.Sample.of({**s, "cpu_speed": v}))
    pairs = pairs_for(m["variants"])
    for label, ss in (("validate, unadjusted", plain), ("validate, adjusted", probed)):
        for (a, b), e in stats.comparisons(ss, pairs, m.get("phases") or [], m["band_pct"]).items():
            print(f"  {label}: {b} over {a} {e.pct:+.2f}%, 95% CI {e.lo_pct:+.2f} .. "
                  f"{e.hi_pct:+.2f}% (half-width {e.half_width_pct:.2f}%, df {e.df}, "
                  f"slope {e.speed_slope})")


if __name__ == "__main__":
    if sys.argv[1] == "sample":
        sample(sys.argv[2], float(sys.argv[3]))
    else:
        read(sys.argv[2], sys.argv[3])
