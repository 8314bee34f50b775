#!/usr/bin/env python3
"""Does the interval stratified by server placement keep its 95%? validate's own statistics
(hpadvise.benchmarks.stats.paired_effect) on simulated epochs of a side-by-side run with two
servers: the variants trade servers every epoch (placement +1, -1, +1, ...), and an epoch's
ln ratio is

    true effect + delta x placement + noise,  noise ~ N(0, sd)

where delta is the difference the two servers make (one faster than the other for the
whole run: both run in every epoch, one each variant, so the ratio moves by the whole
difference as the placement turns). For each number of epochs and each delta, the share of intervals that miss the
true effect and the mean half-width, plain (the paired t over epochs) and stratified (the
placements as strata, what validate does where each holds two epochs or more).

    python3 lab/strata_sim.py [--runs 20000] [--sd 0.016] [--seed 1]

Standard library only, beside hpadvise itself."""

from __future__ import annotations

import argparse
import math
import random

from hpadvise.benchmarks import stats


def trial(rng: random.Random, n: int, delta: float, sd: float, effect: float,
          stratify: bool) -> tuple[bool, float]:
    """One simulated run: whether its interval misses the true effect, and its half-width."""
    place = [(-1) ** i for i in range(n)]
    ratios = [effect + delta * p + rng.gauss(0.0, sd) for p in place]
    e = stats.paired_effect([1.0] * n, [math.exp(x) for x in ratios], 1.0,
                            place if stratify else None)
    true_pct = (math.exp(effect) - 1) * 100
    return not (e.lo_pct <= true_pct <= e.hi_pct), e.half_width_pct


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--sd", type=float, default=0.016, help="epoch noise (ln units)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    print(f"epoch noise sd {a.sd}, true effect +2%, {a.runs} runs per cell")
    print("epochs | delta / sd | plain: missed, mean half-width | stratified: missed, "
          "mean half-width")
    for n in (6, 9, 17):
        for ratio in (0.0, 0.5, 1.0, 3.0):
            row = []
            for stratify in (False, True):
                got = [trial(rng, n, ratio * a.sd, a.sd, math.log(1.02), stratify)
                       for _ in range(a.runs)]
                miss = sum(m for m, _ in got) / a.runs
                hw = sum(h for _, h in got) / a.runs
                row.append(f"{100 * miss:.1f}%, {hw:.2f}%")
            print(f"{n} | {ratio:g} | {row[0]} | {row[1]}")


if __name__ == "__main__":
    main()
