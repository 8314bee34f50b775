#!/usr/bin/env python3
"""Would taking the server out of each epoch's ratio narrow validate's interval honestly?

    python3 lab/validate_server_adjust.py lab/results/*.json

Side by side, the two variants run at the same moment on two servers (0: the loaded one, 1:
its copy) and trade servers from epoch to epoch. If one server is faster than the other by a
factor g, an epoch where B runs on server 0 reads delta + ln g and one where B runs on server
1 reads delta - ln g: the mean over epochs still estimates delta when the trades balance, but
the spread of the epochs carries (ln g)^2, so the interval is wider than the run's noise.

For every simultaneous result given, for its first comparison (B over A), this prints:
- the interval as validate gives it (Student t over the epochs' log ratios, n - 1 df);
- the interval with the server as a covariate: least squares of the epoch log ratio on an
  intercept and s = +1 (B on server 0) or -1 (B on server 1); the intercept is the effect
  with the server's share removed, even when the trades do not balance; its standard error
  from the residuals, Student t with n - 2 df (Draper & Smith, Applied Regression Analysis,
  ch. 1: the intercept's variance is sigma^2 * sum(s^2) / (n * sum(s^2) - (sum s)^2));
- the server factor g the fit finds.
Then, over the runs of one command (grouped by the file name's stem before its last dash),
whether each interval holds the effect of all those runs pooled (the mean of the runs'
estimates): the honesty check of a method, as far as the kept runs go.

Standard library only."""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate_drift import epochs  # noqa: E402

# Student t, two-sided 95% (NIST/SEMATECH e-Handbook 1.3.6.7.2), as benchmarks/stats.py
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
        16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086}


def t975(df: int) -> float:
    return T975.get(df, 2.0)


def plain(lr: list[float]) -> tuple[float, float]:
    n = len(lr)
    m = statistics.fmean(lr)
    return m, t975(n - 1) * statistics.stdev(lr) / math.sqrt(n)


def adjusted(lr: list[float], s: list[int]) -> tuple[float, float, float] | None:
    """(effect, half-width, ln g) from lr = d + c * s, or None where it cannot be fitted."""
    n = len(lr)
    ss, s2 = sum(s), sum(x * x for x in s)
    den = n * s2 - ss * ss
    if n < 4 or den == 0:
        return None
    sy, sxy = sum(lr), sum(x * y for x, y in zip(s, lr))
    c = (n * sxy - ss * sy) / den
    d = (sy - c * ss) / n
    rss = sum((y - d - c * x) ** 2 for x, y in zip(s, lr))
    sigma2 = rss / (n - 2)
    se = math.sqrt(sigma2 * s2 / den)
    return d, t975(n - 2) * se, c


def pct(x: float) -> float:
    return (math.exp(x) - 1) * 100


def main(paths: list[str]) -> int:
    runs = []
    for p in paths:
        try:
            d = json.loads(Path(p).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(d, dict) or d.get("meta", {}).get("design") != "simultaneous":
            continue
        rows = [r for r in epochs(d) if r["server_b"] in (0, 1)]
        if len(rows) < 4:
            continue
        lr = [r["lr"] for r in rows]
        s = [1 if r["server_b"] == 0 else -1 for r in rows]
        fit = adjusted(lr, s)
        if fit is None:
            continue
        group = re.sub(r"-\d+$", "", Path(p).stem)
        runs.append({"file": Path(p).name, "group": group, "n": len(lr),
                     "plain": plain(lr), "adj": fit[:2], "g": fit[2],
                     "balance": sum(s)})
    if not runs:
        print("no simultaneous result with at least 4 epochs on both servers")
        return 1
    print(f"{'run':32} {'n':>3} {'bal':>4}  {'validate (t, n-1)':>22}  "
          f"{'server adjusted (t, n-2)':>25}  {'server g':>8}")
    for r in runs:
        (m, h), (d, ha) = r["plain"], r["adj"]
        print(f"{r['file']:32} {r['n']:3d} {r['balance']:+4d}  {pct(m):+6.2f}% +- {h * 100:5.2f}%"
              f"      {pct(d):+6.2f}% +- {ha * 100:5.2f}%     {pct(r['g']):+6.2f}%")
    hp = [r["plain"][1] * 100 for r in runs]
    ha = [r["adj"][1] * 100 for r in runs]
    print(f"\nmedian half-width: validate's {statistics.median(hp):.2f}%, server adjusted "
          f"{statistics.median(ha):.2f}% ({len(runs)} runs); narrower adjusted in "
          f"{sum(a < b for a, b in zip(ha, hp))} of {len(runs)}")
    groups: dict[str, list[dict]] = {}
    for r in runs:
        groups.setdefault(r["group"], []).append(r)
    print("\nDoes each interval hold its command's pooled effect (runs of one command)?")
    for g, rs in sorted(groups.items()):
        if len(rs) < 2:
            continue
        for key in ("plain", "adj"):
            pooled = statistics.fmean(r[key][0] for r in rs)
            held = sum(abs(r[key][0] - pooled) <= r[key][1] for r in rs)
            print(f"  {g:28} {'validate' if key == 'plain' else 'adjusted':9} pooled "
                  f"{pct(pooled):+6.2f}%: held by {held} of {len(rs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
