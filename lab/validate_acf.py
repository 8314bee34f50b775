#!/usr/bin/env python3
"""Is an epoch's level set at its start, or a slow wander? The servers' per-second log ratio
through each epoch of a side-by-side run, read against itself at growing distances.

    python3 lab/validate_acf.py RUN.json ...   (`validate --json --output`, simultaneous)

For the first comparison, each epoch's per-second ln(B / A) over its measured seconds (the
progress both servers logged at the same seconds, after the warm-up), centred on the mean of
its server placement (even and odd epochs), so that what is left is each epoch's own level
plus what moves within it. Their autocorrelation within the epochs at lags of 1 to 25 s
(as far as the runs reach): a level each start carries and keeps through the epoch shows as
a correlation that stays where it is as the lag grows; a wander slower than a second shows
as one that decays with the lag.

Standard library only."""

from __future__ import annotations

import json
import math
import statistics
import sys

from validate_halves import paired_seconds

LAGS = (1, 2, 3, 5, 8, 12, 16, 20, 25)


def per_second(d: dict) -> dict[int, list[float]]:
    """Epoch -> its per-second ln ratios, centred on its placement's mean."""
    e, warm = d["effects"][0], d["meta"]["warm_s"]
    eps: dict[int, dict] = {}
    for s in d["samples"]:
        if s["epoch"] is not None:
            eps.setdefault(s["epoch"], {})[s["variant"]] = s
    series = {}
    for ep, v in sorted(eps.items()):
        if e["a"] in v and e["b"] in v:
            a, b, ts = paired_seconds(v[e["a"]], v[e["b"]], warm)
            series[ep] = [math.log(b[t] / a[t]) for t in ts if a[t] > 0 and b[t] > 0]
    for parity in (0, 1):
        mine = [x for ep, xs in series.items() if ep % 2 == parity for x in xs]
        if mine:
            m = statistics.fmean(mine)
            for ep in series:
                if ep % 2 == parity:
                    series[ep] = [x - m for x in series[ep]]
    return series


def acf(path: str) -> str:
    series = per_second(json.load(open(path)))
    var = statistics.fmean(x * x for xs in series.values() for x in xs)
    out = []
    for lag in LAGS:
        prods = [xs[i] * xs[i + lag] for xs in series.values() for i in range(len(xs) - lag)]
        if prods and var:
            out.append(f"{lag} s: {statistics.fmean(prods) / var:+.2f}")
    return f"{path.rsplit('/', 1)[-1]}: " + ", ".join(out)


if __name__ == "__main__":
    if not sys.argv[1:]:
        print(__doc__)
        sys.exit(2)
    for p in sys.argv[1:]:
        print(acf(p))
