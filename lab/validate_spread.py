#!/usr/bin/env python3
"""Where the spread of a side-by-side validate comes from, read off its JSON result
(`hpadvise validate ... --json --output FILE`): for each comparison, the epoch ln ratios'
sd (what the CI is made of), how much of it is round to round within an epoch and how much
start to start, and how much of the round-to-round part per-second noise explains (the
rest is a level each run carries for its whole length). lab/README.md quotes it.

    python3 lab/validate_spread.py lab/results/aa-4k-60m.json [...]

Definitions (r = ln(TPS_B / TPS_A) of one round, both from the same epoch):
  epoch sd        sd over epochs of the epoch mean of r (an epoch's TPS is the geometric
                  mean of its rounds, so its ln ratio is the mean of its rounds' r)
  round sd        pooled sd of r around its epoch's mean (degrees of freedom E*(K-1))
  start part      var(epoch mean) - round sd^2 / K: what restarting the servers adds
  per-second sd   pooled sd of ln(B/A) per second of the measured part, around its round's
                  mean, both servers' pgbench -P lines taken at the same second
  white           per-second sd / sqrt(seconds): the round sd per-second noise alone would
                  give; a round sd well above it is a level that lasts the whole run (where
                  the servers trade CPUs within a run, the per-second ratios also carry the
                  CPUs' difference, which cancels over the run: then it is an upper bound)
"""

import json
import math
import statistics
import sys
from collections import defaultdict


def pooled_sd(groups: list[list[float]]) -> float | None:
    ss = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups if len(g) > 1)
    df = sum(len(g) - 1 for g in groups if len(g) > 1)
    return math.sqrt(ss / df) if df else None


def spread(result: dict, a: str, b: str) -> dict:
    warm = result["meta"].get("warm_s") or 0
    runs: dict[int, dict[str, dict]] = defaultdict(dict)
    for s in result["samples"]:
        if s["variant"] in (a, b):
            runs[s["block"]][s["variant"]] = s
    epochs: dict[int, list[float]] = defaultdict(list)
    seconds: list[list[float]] = []
    for blk, pair in sorted(runs.items()):
        if len(pair) != 2:
            continue
        sa, sb = pair[a], pair[b]
        epochs[sa["epoch"]].append(math.log(sb["tps"] / sa["tps"]))
        pa = {round(t): v for t, v, _ in sa["progress"] if t > warm}
        pb = {round(t): v for t, v, _ in sb["progress"] if t > warm}
        seconds.append([math.log(pb[t] / pa[t]) for t in sorted(pa.keys() & pb.keys())
                        if pa[t] > 0 and pb[t] > 0])
    k = statistics.median(len(r) for r in epochs.values())
    means = [statistics.fmean(r) for r in epochs.values()]
    epoch_sd = statistics.stdev(means) if len(means) > 1 else None
    round_sd = pooled_sd(list(epochs.values()))
    per_s = pooled_sd(seconds)
    n_s = statistics.median(len(x) for x in seconds) if seconds else 0
    start = (epoch_sd ** 2 - round_sd ** 2 / k) if epoch_sd is not None and round_sd else None
    return {"a": a, "b": b, "epochs": len(means), "rounds_per_epoch": k,
            "mean": statistics.fmean(means) if means else None, "epoch_sd": epoch_sd,
            "round_sd": round_sd, "start_var": start, "per_second_sd": per_s,
            "white": per_s / math.sqrt(n_s) if per_s and n_s else None}


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: validate_spread.py RESULT.json [...]  (validate --json --output's file)",
              file=sys.stderr)
        return 2
    fmt = lambda x, d=4: "-" if x is None else f"{x:.{d}f}"  # noqa: E731
    print("file | a | b | epochs | rounds/epoch | mean ln ratio | epoch sd | round sd | "
          "start var | per-second sd | white")
    for path in paths:
        try:
            with open(path) as f:
                result = json.load(f)
        except (OSError, ValueError) as exc:
            print(f"validate_spread: {path}: {exc}", file=sys.stderr)
            return 2
        for e in result.get("effects", []):
            s = spread(result, e["a"], e["b"])
            print(" | ".join([path, s["a"], s["b"], str(s["epochs"]),
                              f"{s['rounds_per_epoch']:g}", fmt(s["mean"]),
                              fmt(s["epoch_sd"]), fmt(s["round_sd"]), fmt(s["start_var"], 5),
                              fmt(s["per_second_sd"]), fmt(s["white"])]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
