#!/usr/bin/env python3
"""Where in its 30 seconds an epoch's ratio moves: the per-second TPS of both servers of a
side-by-side run (the `progress` each sample keeps), read as the log ratio of B over A second
by second.

    python3 lab/validate_persecond.py RUN.json [RUN.json ...]

Per run: the sd of the epochs' ln ratios; the sd of the per-second ln ratios around their
epoch's mean, and what it alone would give an epoch of n seconds (sd / sqrt(n), were the
seconds independent); their lag-1 autocorrelation; each server's own per-second sd and the
correlation of the two servers' seconds. Where the epochs spread no more than the seconds
predict, what moves an epoch is what moves its seconds. Standard library only."""

from __future__ import annotations

import json
import math
import statistics
import sys


def main() -> None:
    print("| run | epochs | sd of epoch ln ratios | per-second sd | epoch sd if the seconds "
          "were independent | lag-1 autocorrelation | per-second sd A / B | corr(A, B) |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for path in sys.argv[1:]:
        r = json.load(open(path))
        warm = r["meta"]["warm_s"]
        by: dict = {}
        for s in r["samples"]:
            by.setdefault(s["epoch"], {})[s["variant"]] = s
        eps, dev, da, db, ac, n = [], [], [], [], [], 0
        for d in by.values():
            if len(d) < 2:
                continue
            a, b = list(d.values())[:2]
            pa = {round(t): x for t, x, _ in a["progress"]}
            pb = {round(t): x for t, x, _ in b["progress"]}
            ts = [t for t in sorted(pa) if t in pb and t > warm and pa[t] > 0 and pb[t] > 0]
            la, lb = [math.log(pa[t]) for t in ts], [math.log(pb[t]) for t in ts]
            lr = [y - x for x, y in zip(la, lb)]
            mu, ma, mb = statistics.mean(lr), statistics.mean(la), statistics.mean(lb)
            eps.append(math.log(b["tps"] / a["tps"]))
            dev += [x - mu for x in lr]
            da += [x - ma for x in la]
            db += [y - mb for y in lb]
            v = sum((x - mu) ** 2 for x in lr)
            ac.append(sum((lr[i] - mu) * (lr[i + 1] - mu) for i in range(len(lr) - 1)) / v)
            n = len(lr)
        sd = math.sqrt(sum(x * x for x in dev) / len(dev))
        sa = math.sqrt(sum(x * x for x in da) / len(da))
        sb = math.sqrt(sum(x * x for x in db) / len(db))
        c = sum(x * y for x, y in zip(da, db)) / len(da) / (sa * sb)
        print(f"| {path.rsplit('/', 1)[-1]} | {len(eps)} | {100 * statistics.stdev(eps):.2f}% | "
              f"{100 * sd:.2f}% | {100 * sd / math.sqrt(n):.2f}% | {statistics.mean(ac):+.2f} | "
              f"{100 * sa:.1f}% / {100 * sb:.1f}% | {c:+.2f} |")


if __name__ == "__main__":
    main()
