#!/usr/bin/env python3
"""Where a side-by-side run's epoch noise comes from: within the run, or with each start.

    python3 lab/validate_halves.py RUN.json ...   (`validate --json --output`, simultaneous)

For the first comparison (current -> recommended, or an A/A's), each epoch's ln ratio (the runs' TPS, as validate takes it) and
the ln ratios of the first and the second half of its measured seconds (the per-second
progress both servers logged at the same seconds, after the warm-up). The halves of one run
differ only by what moves within a run; their difference d gives the variance that part
adds to a whole run's ratio, E[d^2] / 4. The epochs' variance within a server placement
(the placements alternate every epoch, so even and odd epochs) less that part is what each
start adds. Prints the three standard deviations and the run's reported half-width.

Standard library only."""

from __future__ import annotations

import json
import math
import statistics
import sys


def paired_seconds(a_sample: dict, b_sample: dict, warm: float
                   ) -> tuple[dict[int, float], dict[int, float], list[int]]:
    """Two runs' per-second TPS (their `progress`) after the warm-up, by the second, and the
    seconds both logged."""
    a = {round(t): x for t, x, *_ in a_sample["progress"] if t > warm}
    b = {round(t): x for t, x, *_ in b_sample["progress"] if t > warm}
    return a, b, sorted(set(a) & set(b))


def halves(path: str) -> str:
    d = json.load(open(path))
    warm = d["meta"]["warm_s"]
    first, second = d["effects"][0]["a"], d["effects"][0]["b"]
    blocks: dict[int, dict] = {}
    for s in d["samples"]:
        blocks.setdefault(s["block"], {})[s["variant"]] = s
    whole, diff = [], []
    for _, vs in sorted(blocks.items()):
        if first not in vs or second not in vs:
            continue
        a, b, ts = paired_seconds(vs[first], vs[second], warm)
        h = len(ts) // 2

        def ln(part):
            return math.log(sum(b[t] for t in part) / sum(a[t] for t in part))
        whole.append(math.log(vs[second]["tps"] / vs[first]["tps"]))
        diff.append(ln(ts[:h]) - ln(ts[h:]))
    n = len(whole)
    even, odd = whole[0::2], whole[1::2]
    within_placement = (sum((x - statistics.mean(even)) ** 2 for x in even)
                        + sum((x - statistics.mean(odd)) ** 2 for x in odd)) / (n - 2)
    in_run = statistics.mean(x * x for x in diff) / 4
    start = max(0.0, within_placement - in_run)
    hw = d["effects"][0]["half_width_pct"]
    return (f"{path.rsplit('/', 1)[-1]}: {n} epochs, sd within a placement "
            f"{100 * math.sqrt(within_placement):.2f}%, of it within the runs "
            f"{100 * math.sqrt(in_run):.2f}% and with each start {100 * math.sqrt(start):.2f}%; "
            f"reported half-width {hw:.2f}%")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(halves(p))
