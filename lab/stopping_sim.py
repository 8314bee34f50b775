#!/usr/bin/env python3
"""How often validate's 95% interval misses the true effect when runs stop early on the
interval's own width (--target-ci), against a fixed number of epochs.

Simulates validate's statistics as implemented (hpadvise.benchmarks.stats): epoch ln ratios
drawn from a normal distribution with the true effect 0 and a chosen sd, the paired t interval
after every epoch, the stopping rule `should_stop` with the given target and at least
--min-epochs, and the budget's epoch count as the last resort. Prints the share of final
intervals that exclude 0 (nominal: 5%) and the mean number of epochs used.

With --slope, each epoch also has a CPU speed ratio z (normal, sd --zsd) that moves its ln
ratio by slope x z, and validate's adjustment for it (stats.paired_effect's `speed`, adjust.py)
takes part in every interval the rule looks at, as in validate where every run is probed.

    python3 lab/stopping_sim.py --max-epochs 6 --target 1 --sd 0.003 0.008 0.012 0.02
    python3 lab/stopping_sim.py --max-epochs 17 --slope 0.9 --zsd 0.019 --sd 0.009
"""

from __future__ import annotations

import argparse
import math
import random

from hpadvise.benchmarks import stats


def trial(rng: random.Random, sd: float, target: float | None, max_epochs: int,
          min_epochs: int, slope: float | None = None, zsd: float = 0.0) -> tuple[bool, int]:
    """One validate run: (its interval missed the true effect, epochs used)."""
    a, b, zs = [], [], []
    for n in range(1, max_epochs + 1):
        z = rng.gauss(0.0, zsd) if slope is not None else 0.0
        a.append(1.0)
        b.append(math.exp(rng.gauss(0.0, sd) + (slope or 0.0) * z))
        zs.append(z)
        if n < 2:
            continue
        e = stats.paired_effect(a, b, speed=zs if slope is not None else None)
        if n == max_epochs or stats.should_stop([e], target, min_epochs):
            return not (e.lo_pct <= 0.0 <= e.hi_pct), n
    raise AssertionError("unreachable: the last epoch always ends the run")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sd", type=float, nargs="+", default=[0.003, 0.008, 0.012, 0.02, 0.03],
                    help="sd of the epoch ln ratio (this VM: 0.003-0.03)")
    ap.add_argument("--target", type=float, default=1.0, help="--target-ci, in percent")
    ap.add_argument("--max-epochs", type=int, default=6, help="epochs the budget holds")
    ap.add_argument("--min-epochs", type=int, default=3)
    ap.add_argument("--trials", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slope", type=float, default=None,
                    help="the epochs carry a CPU speed ratio this slope moves (adjusted for)")
    ap.add_argument("--zsd", type=float, default=0.019,
                    help="sd of the speed ratio's log (the fresh runs: 0.01-0.03)")
    o = ap.parse_args()
    rng = random.Random(o.seed)
    print(f"target {o.target}%, {o.min_epochs}..{o.max_epochs} epochs, {o.trials} trials"
          + (f", slope {o.slope} on a speed ratio of sd {o.zsd}" if o.slope is not None else ""))
    for sd in o.sd:
        for name, target in (("fixed", None), ("early stop", o.target)):
            runs = [trial(rng, sd, target, o.max_epochs, o.min_epochs, o.slope, o.zsd)
                    for _ in range(o.trials)]
            miss = sum(m for m, _ in runs) / len(runs)
            mean_n = sum(n for _, n in runs) / len(runs)
            print(f"sd {sd:.3f}  {name:<10}  missed {miss:6.1%}  mean epochs {mean_n:5.1f}")


if __name__ == "__main__":
    main()
