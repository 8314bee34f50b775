#!/usr/bin/env python3
"""Recorded runs analysed again: a level per server placement, or a line per placement over
the run (stats.paired_effect's drift), on the same epochs.

    python3 lab/strata_lines.py RUN1.json RUN2.json ...   (`validate --json --output`)

For the first comparison of every result (current over recommended, or an A/A's), the
epochs' ln ratios, placements and epoch numbers are read off the samples as validate pairs
them (the geometric mean of each variant's runs in an epoch), and paired_effect computes the
effect both ways. Per run: the estimate and half-width each way. Over the runs, each way:
the inverse-variance pooled effect, how many intervals hold it and the other runs' pooled
effect, Cochran's Q and the half-widths' median.

Needs hpadvise importable (the venv, or PYTHONPATH to an installed copy)."""

from __future__ import annotations

import json
import math
import statistics
import sys
from unittest import mock

from hpadvise.benchmarks import stats

WAYS = {"levels": 10 ** 9, "lines": None}


def epochs(d: dict) -> tuple[list[float], list[float], list, list[int]]:
    """TPS of A and B per epoch, each epoch's placement (the servers A's and B's runs ran
    on) and its number, for the first comparison."""
    e = d["effects"][0]
    ta, tb, keys, when = [], [], [], []
    for ep in sorted({s["epoch"] for s in d["samples"] if s.get("epoch") is not None}):
        sa = [s for s in d["samples"] if s.get("epoch") == ep and s["variant"] == e["a"]]
        sb = [s for s in d["samples"] if s.get("epoch") == ep and s["variant"] == e["b"]]
        if not sa or len(sa) != len(sb):
            continue
        ta.append(stats.geomean([s["tps"] for s in sa]))
        tb.append(stats.geomean([s["tps"] for s in sb]))
        keys.append((tuple(sorted({s["server"] for s in sa})),
                     tuple(sorted({s["server"] for s in sb}))))
        when.append(ep)
    return ta, tb, keys, when


def effect(d: dict, way: str) -> stats.Effect:
    at = WAYS[way] or stats.DRIFT_MIN_EPOCHS
    ta, tb, keys, when = epochs(d)
    with mock.patch.object(stats, "DRIFT_MIN_EPOCHS", at):
        return stats.paired_effect(ta, tb, d["meta"].get("band_pct", 1.0), keys, when)


def se_of(e: stats.Effect) -> tuple[float, float, float, float]:
    """ln estimate, se, ln bounds: se = half-width / t on the df the interval used."""
    lo, hi = math.log1p(e.lo_pct / 100), math.log1p(e.hi_pct / 100)
    return math.log1p(e.pct / 100), (hi - lo) / 2 / stats.t975(e.df), lo, hi


def over(runs: list[stats.Effect]) -> str:
    rep = [se_of(e) for e in runs]
    w = [1 / se ** 2 for _, se, _, _ in rep]
    mw = sum(wi * m for wi, (m, *_) in zip(w, rep)) / sum(w)
    hold = sum(lo <= mw <= hi for *_, lo, hi in rep)
    loo = 0
    for i, (*_, lo, hi) in enumerate(rep):
        mo = (sum(wi * rep[j][0] for j, wi in enumerate(w) if j != i)
              / sum(wi for j, wi in enumerate(w) if j != i))
        loo += lo <= mo <= hi
    q = sum(wi * (m - mw) ** 2 for wi, (m, *_) in zip(w, rep))
    med = statistics.median(e.half_width_pct for e in runs)
    return (f"pooled {(math.exp(mw) - 1) * 100:+.2f}%, holding it {hold} of {len(rep)}, "
            f"the others' {loo} of {len(rep)}, Q = {q:.1f} on {len(rep) - 1} df, "
            f"median half-width {med:.2f}%")


def main(paths: list[str]) -> int:
    got = {w: [] for w in WAYS}
    print("| run | epochs | as reported | levels | lines |")
    print("|---|---:|---|---|---|")
    for p in paths:
        d = json.loads(open(p).read())
        rep = d["effects"][0]
        row = [p.rsplit("/", 1)[-1].removesuffix(".json"), str(effect(d, "levels").n),
               f"{rep['pct']:+.2f}% ±{rep['half_width_pct']:.2f}"]
        for w in WAYS:
            e = effect(d, w)
            got[w].append(e)
            row.append(f"{e.pct:+.2f}% ±{e.half_width_pct:.2f}" + ("" if e.drift or w ==
                                                                    "levels" else " (levels)"))
        print("| " + " | ".join(row) + " |")
    if len(paths) > 1:
        for w in WAYS:
            print(f"{w}: {over(got[w])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if sys.argv[1:] else (print(__doc__) or 2))
