#!/usr/bin/env python3
"""How many rounds per epoch should a side-by-side validate run? Read off results that ran
two or more rounds per epoch (`hpadvise validate ... --json --output FILE`).

    python3 lab/rounds_per_epoch.py lab/results/repeat-10m-1.json [...]

validate_spread.py splits each comparison's spread into a round-to-round part (sd of a
round's ln ratio around its epoch's mean) and a start-to-start part (the variance starting
the servers adds to an epoch's mean). An epoch of K rounds then has

    var(epoch mean) = start + round^2 / K

and costs restart + K x cycle seconds, where cycle is a round (warm-up, measured run and
the clients' start: the median gap between the starts of consecutive rounds of one epoch)
and restart is the rest of an epoch (stopping, starting and prewarming the servers: the
median gap between the first runs of consecutive epochs, less K cycles). In the same time
the run took (its epochs x that gap), K' rounds per epoch hold E' = floor(time / epoch')
epochs, and the comparison's 95% half-width is about

    t(0.975, E' - 1) x sqrt(var(epoch mean) / E')      (in ln units; x 100 for %)

The row for the K the run used is the formula's check against the half-width it reported.
The split is an estimate from few epochs; where start comes out below 0 it is taken as 0.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate_spread import spread  # noqa: E402

from hpadvise.benchmarks.stats import t975  # noqa: E402


def timing(result: dict, a: str) -> tuple[float, float] | None:
    """(cycle, epoch gap) in seconds from variant a's run starts, or None if too few."""
    starts: dict[int, list[float]] = defaultdict(list)
    for s in result["samples"]:
        if s["variant"] == a and s.get("epoch") is not None:
            starts[s["epoch"]].append(s["started"])
    firsts = [min(v) for _, v in sorted(starts.items())]
    cycles = [y - x for v in starts.values() for x, y in zip(sorted(v), sorted(v)[1:])]
    gaps = [y - x for x, y in zip(firsts, firsts[1:])]
    if not cycles or not gaps:
        return None
    return statistics.median(cycles), statistics.median(gaps)


def projection(result: dict, a: str, b: str, ks=(1, 2, 3)) -> list[tuple] | None:
    s = spread(result, a, b)
    t = timing(result, a)
    k = s["rounds_per_epoch"]
    if t is None or k < 2 or s["round_sd"] is None or s["epoch_sd"] is None:
        return None
    cycle, gap = t
    restart = max(0.0, gap - k * cycle)
    start = max(0.0, s["start_var"])
    total = s["epochs"] * gap
    rows = []
    for kk in ks:
        epoch = restart + kk * cycle
        n = int(total // epoch)
        var = start + s["round_sd"] ** 2 / kk
        hw = t975(n - 1) * math.sqrt(var / n) * 100 if n > 1 else None
        rows.append((kk, round(epoch, 1), n, math.sqrt(var) * 100, hw))
    return [(s, cycle, restart)] + rows


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: rounds_per_epoch.py RESULT.json [...]", file=sys.stderr)
        return 2
    print("file | rounds now | restart s | cycle s | round sd % | start sd % | "
          "K' rounds: epoch s, epochs, epoch sd %, half-width %")
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        e = result["effects"][0]
        p = projection(result, e["a"], e["b"])
        if p is None:
            print(f"{path} | not enough rounds or epochs to split")
            continue
        (s, cycle, restart), rows = p[0], p[1:]
        said = "; ".join(f"{k}: {ep:g} s, {n}, {sd:.2f}, "
                         + ("-" if hw is None else f"{hw:.2f}") for k, ep, n, sd, hw in rows)
        print(f"{path} | {s['rounds_per_epoch']:g} (reported {e['half_width_pct']:.2f}%) | "
              f"{restart:.1f} | {cycle:.1f} | {s['round_sd'] * 100:.2f} | "
              f"{math.sqrt(max(0.0, s['start_var'])) * 100:.2f} | {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
