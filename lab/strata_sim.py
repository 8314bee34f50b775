#!/usr/bin/env python3
"""Does the interval stratified by server placement keep its 95%? validate's own statistics
(hpadvise.benchmarks.stats.paired_effect) on simulated epochs of a side-by-side run with two
servers: the variants trade servers every epoch (placement +1, -1, +1, ...), and an epoch's
ln ratio is

    true effect + delta(t) x placement + noise,  noise ~ N(0, sd)

where delta(t) is the difference the two servers make in epoch t (both run in every epoch,
one each variant, so the ratio moves by the whole difference as the placement turns). Its
shapes, in units of sd:

    none      0
    constant  2 for the whole run
    linear    from -2 to +2 over the run (a copy growing slower, epoch by epoch)
    step      0, then 3 from an epoch drawn between the third and the third-to-last
    walk      a random walk with steps of 0.5
    effect    none, but the effect itself moves from -1.5 to +1.5 around its mean (the
              estimand is then the run's mean effect)

For each number of epochs and each shape, the share of intervals that miss the true effect
and the mean half-width, three ways: plain (the paired t over epochs), levels (the
placements as strata, a level each) and lines (the placements as strata, a straight line
each over the run). validate fits lines where each placement holds stats.DRIFT_MIN_EPOCHS
epochs or more, levels where each holds two or more, else the plain t.

    python3 lab/strata_sim.py [--runs 10000] [--sd 0.016] [--seed 1]

Standard library only, beside hpadvise itself."""

from __future__ import annotations

import argparse
import math
import random
from unittest import mock

from hpadvise.benchmarks import stats

SHAPES = ("none", "constant", "linear", "step", "walk", "effect")
WAYS = ("plain", "levels", "lines")


def deltas(rng: random.Random, n: int, shape: str) -> tuple[list[float], list[float]]:
    """The servers' difference and the effect's own movement per epoch, in units of sd."""
    zero = [0.0] * n
    if shape == "constant":
        return [2.0] * n, zero
    if shape == "linear":
        return [-2.0 + 4.0 * i / (n - 1) for i in range(n)], zero
    if shape == "step":
        at = rng.randint(2, n - 3)
        return [3.0 if i >= at else 0.0 for i in range(n)], zero
    if shape == "walk":
        out, x = [], 0.0
        for _ in range(n):
            x += rng.gauss(0.0, 0.5)
            out.append(x)
        return out, zero
    if shape == "effect":
        return zero, [-1.5 + 3.0 * i / (n - 1) for i in range(n)]
    return zero, zero


def trial(rng: random.Random, n: int, shape: str, sd: float, effect: float,
          way: str) -> tuple[bool, float]:
    """One simulated run: whether its interval misses the true effect, and its half-width."""
    place = [(-1) ** i for i in range(n)]
    delta, moves = deltas(rng, n, shape)
    ratios = [effect + (m + d * p) * sd + rng.gauss(0.0, sd)
              for p, d, m in zip(place, delta, moves)]
    # the "effect" shape moves around the effect symmetrically: its mean stays the effect
    at = {"plain": None, "levels": 10 ** 9, "lines": 3}[way]
    with mock.patch.object(stats, "DRIFT_MIN_EPOCHS", at or stats.DRIFT_MIN_EPOCHS):
        e = stats.paired_effect([1.0] * n, [math.exp(x) for x in ratios], 1.0,
                                place if at else None)
    true_pct = (math.exp(effect) - 1) * 100
    return not (e.lo_pct <= true_pct <= e.hi_pct), e.half_width_pct


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--sd", type=float, default=0.016, help="epoch noise (ln units)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    print(f"epoch noise sd {a.sd}, true effect +2%, {a.runs} runs per cell; "
          f"validate fits lines from {stats.DRIFT_MIN_EPOCHS} epochs a placement")
    print("| epochs | delta | " + " | ".join(f"{w}: missed, mean half-width" for w in WAYS)
          + " |")
    for n in (6, 8, 10, 11, 12, 17):
        for shape in SHAPES:
            row = []
            for way in WAYS:
                got = [trial(rng, n, shape, a.sd, math.log(1.02), way) for _ in range(a.runs)]
                miss = sum(m for m, _ in got) / a.runs
                hw = sum(h for _, h in got) / a.runs
                row.append(f"{100 * miss:.1f}%, {hw:.2f}%")
            print(f"| {n} | {shape} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
