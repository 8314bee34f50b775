#!/usr/bin/env python3
"""Does the interval adjusted for the CPUs' speed keep its 95%, and what does it cost where
the CPUs run steadily? validate's own statistics (stats.paired_effect, with and without the
`speed` covariate) on simulated epochs of a side-by-side run, two servers trading placements
every epoch:

    ln ratio = effect + slope x z + delta x placement + noise,   z ~ N(0, sd_z), noise ~ N(0, sd)

z is the epoch's log ratio of the two sides' CPU speeds, as the probe reads it (with a
reading error of its own, sd_read, that the model does not know about), delta a server
faster than its twin. Defaults from the A/A read beside a probe (lab/README.md, "The CPUs'
own speed as a covariate"): sd_z 1.9%, slope 0.9, noise 0.9%, the servers 0.5% apart.

For 17 epochs (10 minutes of the card's command) and 11 (5 minutes), slopes 0.9 and 0
(CPUs whose speed explains nothing) at sd_z 1.9%, and a slope of 1 at sd_z 0.3%, 0.5% and
0.8% (CPUs that run nearly steadily, around stats.SPEED_MIN_SD), the share of intervals that
miss the true effect and the mean half-width: unadjusted, adjusted always, and as validate
decides (adjusted only where the epochs' speed ratios spread by SPEED_MIN_SD or more).

    python3 lab/speed_sim.py [--runs 10000] [--seed 1]

Standard library only, beside hpadvise itself."""

from __future__ import annotations

import argparse
import math
import random

from hpadvise.benchmarks import stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sd-z", type=float, default=0.019)
    ap.add_argument("--sd", type=float, default=0.009)
    ap.add_argument("--sd-read", type=float, default=0.002)
    ap.add_argument("--delta", type=float, default=0.005)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    effect = 0.01
    rule = stats.SPEED_MIN_SD
    print("| epochs | slope | sd_z | way | missed | mean half-width |")
    print("|---:|---:|---:|---|---:|---:|")
    for n in (17, 11):
        for slope, sd_z in ((0.9, a.sd_z), (0.0, a.sd_z), (1.0, 0.003), (1.0, 0.005),
                            (1.0, 0.008)):
            tally = {"unadjusted": [0, 0.0], "adjusted always": [0, 0.0],
                     "as validate decides": [0, 0.0]}
            for _ in range(a.runs):
                place = [1 if i % 2 == 0 else -1 for i in range(n)]
                z = [rng.gauss(0, sd_z) for _ in range(n)]
                y = [effect + slope * zi + a.delta * p + rng.gauss(0, a.sd)
                     for zi, p in zip(z, place)]
                read = [zi + rng.gauss(0, a.sd_read) for zi in z]
                for way, speed, min_sd in (("unadjusted", None, rule),
                                           ("adjusted always", read, 0.0),
                                           ("as validate decides", read, rule)):
                    e = stats.paired_effect([1.0] * n, [math.exp(v) for v in y], 1.0, place,
                                            list(range(n)), speed, min_sd)
                    true = (math.exp(effect) - 1) * 100
                    tally[way][0] += not (e.lo_pct <= true <= e.hi_pct)
                    tally[way][1] += e.half_width_pct
            for way, (miss, hw) in tally.items():
                print(f"| {n} | {slope} | {100 * sd_z:.1f}% | {way} | "
                      f"{100 * miss / a.runs:.1f}% | {hw / a.runs:.2f}% |")


if __name__ == "__main__":
    main()
