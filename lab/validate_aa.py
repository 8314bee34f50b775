#!/usr/bin/env python3
"""Does the second variant of an A/A run carry a handicap of its own?

    python3 lab/validate_aa.py AA1.json AA2.json ...   (`validate --json --output`, A/A runs)

In an A/A run (`--variants current,current`) the two variants are the same settings, and the
only thing that tells them apart for a whole run is their position: the first is A, the
second B. The design turns everything else between them from epoch to epoch (which server
holds the loaded data or a copy, which CPU group a server starts on, which server starts and
prewarms first: side_by_side.assign_servers, variants.start_order, variants.group_of). So the
mean of many A/A estimates is the position's own effect, and it should be 0.

Prints, over the runs given: each run's estimate and interval as reported; the unweighted mean
of the estimates with its t on k-1 degrees of freedom (each run one observation: the runs'
own drifts and machines are in their scatter); the epochs split by which variant started its
server first in that epoch, and by the epoch's parity (which server and CPU group B had);
and how many intervals hold 0. The splits take the runs of one round an epoch (validate's
default); in a run of several, B's CPU group turns within an epoch. Standard library only."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate_repeat import epoch_ratios, t975  # noqa: E402


def b_started_first(epoch: int, n: int = 2) -> bool:
    """Whether B's server started first at this epoch, as variants.start_order turns it for
    two variants alike: every n epochs the order turns."""
    return (epoch // n) % n == 1


def main(paths: list[str]) -> int:
    ests, first, second, even, odd, hold = [], [], [], [], [], 0
    print("| run | epochs | B over A, 95% CI | holds 0 |")
    print("|---|---:|---|---|")
    for p in paths:
        d = json.load(open(p))
        e = d["effects"][0]
        if e["a"].split("#")[0] != e["b"].split("#")[0]:
            print(f"{p}: not an A/A run ({e['a']}, {e['b']})", file=sys.stderr)
            return 2
        ests.append(e["pct"])
        holds = e["lo_pct"] <= 0 <= e["hi_pct"]
        hold += holds
        print(f"| {p.rsplit('/', 1)[-1]} | {e['n']} | {e['pct']:+.2f}%, {e['lo_pct']:+.2f} .. "
              f"{e['hi_pct']:+.2f} | {'yes' if holds else 'no'} |")
        if len({s["block"] for s in d["samples"]}) != len({s["epoch"] for s in d["samples"]}):
            continue  # rounds within an epoch: B's CPU group turns within it (not split)
        for ep, lr in enumerate(epoch_ratios(d)):
            (second if b_started_first(ep) else first).append(100 * lr)
            (odd if ep % 2 else even).append(100 * lr)
    k = len(ests)
    print(f"\nintervals holding 0: {hold} of {k}")
    if k >= 2:
        m, sd = statistics.fmean(ests), statistics.stdev(ests)
        se = sd / math.sqrt(k)
        print(f"mean of the {k} estimates {m:+.2f}%, sd {sd:.2f}%, se {se:.2f}%, "
              f"t = {m / se:+.2f} on {k - 1} df (|t| > {t975(k - 1):.2f} at 95%): "
              f"95% CI {m - t975(k - 1) * se:+.2f} .. {m + t975(k - 1) * se:+.2f}%")
    splits = (("A's server started first", first, "B's server started first", second),
              ("even epochs (B on server 1, CPU group 1 first)", even,
               "odd epochs (B on server 0, CPU group 0 first)", odd))
    for name_a, a, name_b, b in splits:
        if len(a) > 1 and len(b) > 1:
            print(f"{name_a}: {statistics.fmean(a):+.2f}% over {len(a)} epochs; {name_b}: "
                  f"{statistics.fmean(b):+.2f}% over {len(b)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if len(sys.argv) > 1 else 2)
