#!/usr/bin/env python3
"""How a side-by-side validate run's ratio moves from epoch to epoch, and with what.

    python3 lab/validate_drift.py RESULT.json [RESULT.json ...]
    python3 lab/validate_drift.py lab/results/*.json     (every side-by-side result kept)

For each result of the simultaneous design (`validate --json --output`), for its first
comparison (B over A): every epoch's log ratio (the geometric mean of B's runs over A's, as
validate computes it) beside what the run recorded anyway: the THP phase, which server (0 the
loaded one, 1 its copy) B ran on, B's and A's CPU steal, A's own TPS (the machine's pace),
and the time. Then, over all epochs of all the files given:

- the lag-1 autocorrelation of the epoch ratios within a run (independent epochs give about
  0; a drift gives clearly more);
- how much of the spread the phase and the server explain (least squares on indicator
  columns; what is left is the residual);
- the lag-1 autocorrelation of what is left;
- the spread split in two: the rounds of one epoch (both servers measured at the same
  moment, so what differs between two rounds of one start is the run's own noise) and what
  each epoch's starts add on top (the variance of the epoch means less the rounds' share).

Standard library only. Prints a table per run and the pooled figures."""

from __future__ import annotations

import json
import math
import statistics
import sys


def epochs(d: dict) -> list[dict]:
    """One row per epoch of the first comparison: its log ratio and covariates."""
    e = d["effects"][0]
    a, b = e["a"], e["b"]
    rows = []
    for ep in sorted({s["epoch"] for s in d["samples"]}):
        sa = [s for s in d["samples"] if s["epoch"] == ep and s["variant"] == a]
        sb = [s for s in d["samples"] if s["epoch"] == ep and s["variant"] == b]
        if not sa or not sb:
            continue
        ga = statistics.fmean(math.log(s["tps"]) for s in sa)
        gb = statistics.fmean(math.log(s["tps"]) for s in sb)
        # each round: the two servers' runs of one block (measured at the same moment)
        rounds = [math.log(x["tps"] / y["tps"]) for x in sb for y in sa
                  if x["block"] == y["block"]]
        rows.append({"epoch": ep, "lr": gb - ga, "rounds": rounds, "phase": sb[0].get("phase") or "-",
                     "server_b": sb[0].get("server"),
                     "steal_a": statistics.fmean(s["steal_pct"] for s in sa),
                     "steal_b": statistics.fmean(s["steal_pct"] for s in sb),
                     "tps_a": math.exp(ga), "t": min(s["started"] for s in sa + sb)})
    return rows


def lag1(xs: list[float]) -> float | None:
    if len(xs) < 3:
        return None
    m = statistics.fmean(xs)
    den = sum((x - m) ** 2 for x in xs)
    return sum((xs[i] - m) * (xs[i + 1] - m) for i in range(len(xs) - 1)) / den if den else None


def residuals(rows: list[dict], keys: tuple[str, ...]) -> list[float]:
    """What is left of each log ratio after the mean of its group (the run's own mean, and
    each key's level within the run): a one-way-per-key centring, applied in turn."""
    left = [r["lr"] for r in rows]
    for k in keys:
        groups: dict = {}
        for r, x in zip(rows, left):
            groups.setdefault(r[k], []).append(x)
        means = {g: statistics.fmean(v) for g, v in groups.items()}
        left = [x - means[r[k]] for r, x in zip(rows, left)]
    return left


def main(paths: list[str]) -> int:
    pooled_r1, pooled_r1_left, sd_all, sd_left = [], [], [], []
    for p in paths:
        d = json.loads(open(p).read())
        if not isinstance(d, dict) or not {"meta", "samples", "effects"} <= set(d):
            continue  # another command's output among the lab's records
        if d["meta"].get("design") != "simultaneous" or not d["effects"]:
            print(f"{p}: design {d['meta'].get('design')}, skipped")
            continue
        rows = epochs(d)
        e = d["effects"][0]
        print(f"\n{p}: {e['b']} over {e['a']}, {len(rows)} epochs, "
              f"{e['pct']:+.2f}% (95% CI {e['lo_pct']:+.2f} .. {e['hi_pct']:+.2f})")
        print("epoch  ratio   phase          B on  steal A  steal B  A's TPS  min")
        t0 = rows[0]["t"] if rows else 0
        for r in rows:
            print(f"{r['epoch']:>5}  {math.exp(r['lr']):.4f}  {r['phase']:<13}  "
                  f"{r['server_b']!s:>4}  {r['steal_a']:7.1f}  {r['steal_b']:7.1f}  "
                  f"{r['tps_a']:7.0f}  {(r['t'] - t0) / 60:4.1f}")
        lrs = [r["lr"] for r in rows]
        left = residuals(rows, ("phase", "server_b"))
        r1, r1l = lag1(lrs), lag1(left)
        if len(rows) >= 3:
            sd_all.append(statistics.stdev(lrs))
            sd_left.append(statistics.stdev(left))
        pooled_r1 += [r1] if r1 is not None else []
        pooled_r1_left += [r1l] if r1l is not None else []
        within = [x - statistics.fmean(r["rounds"]) for r in rows for x in r["rounds"]
                  if len(r["rounds"]) > 1]
        k = statistics.fmean(len(r["rounds"]) for r in rows) if rows else 1
        dof = sum(len(r["rounds"]) - 1 for r in rows if len(r["rounds"]) > 1)
        if dof and len(lrs) > 1:
            var_round = sum(x * x for x in within) / dof
            var_start = statistics.variance(lrs) - var_round / k
            print(f"rounds of one epoch: sd {math.sqrt(var_round) * 100:.2f}% ({k:.0f} a "
                  f"epoch); the starts add sd {math.sqrt(max(0, var_start)) * 100:.2f}%"
                  + (" (none beyond the rounds)" if var_start <= 0 else ""))
        print(f"lag-1 autocorrelation {r1 if r1 is None else round(r1, 2)}; after phase and "
              f"server {r1l if r1l is None else round(r1l, 2)}; sd of log ratios "
              f"{statistics.stdev(lrs) * 100 if len(lrs) > 1 else 0:.2f}% -> "
              f"{statistics.stdev(left) * 100 if len(left) > 1 else 0:.2f}% after them")
    if pooled_r1:
        print(f"\n{len(pooled_r1)} runs: mean lag-1 autocorrelation "
              f"{statistics.fmean(pooled_r1):+.2f} (after phase and server "
              f"{statistics.fmean(pooled_r1_left):+.2f}); mean sd of epoch log ratios "
              f"{statistics.fmean(sd_all) * 100:.2f}% -> {statistics.fmean(sd_left) * 100:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
