#!/usr/bin/env python3
"""What a declared burn-in epoch would have given the recorded runs: every side-by-side run
(`validate --json --output`) recomputed as validate computes it (stats.paired_effect, the
interval stratified by server placement), once with all its epochs and once without its first.
A design that runs one unmeasured epoch before the measured ones, declared before the run and
the same for every run, measures exactly the later epochs in the same budget, so the second
figure is the one it would have reported.

    .venv/bin/python lab/burn_in.py lab/results/series-10m-*.json lab/results/after-5m-*.json ...

Runs are grouped by name (series-10m-3.json is in series-10m). Per group: the median
half-width, the pooled effect (inverse-variance), Cochran's Q with its p-value and the
DerSimonian-Laird between-run sd (DerSimonian and Laird 1986, Control Clin Trials 7:177),
and how many intervals hold the pooled effect of the other runs; with all epochs, then
without the first."""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate_repeat import chi2_sf  # noqa: E402

from hpadvise.benchmarks.stats import paired_effect, t975  # noqa: E402


def epochs(d: dict) -> list[tuple[float, float, tuple]]:
    """(current's TPS, recommended's TPS, placement) per epoch, as stats.effects pairs them:
    the geometric mean of each variant's runs in the epoch, the servers each ran on."""
    e = d["effects"][0]
    out = []
    for ep in sorted({s["epoch"] for s in d["samples"] if s.get("epoch") is not None}):
        sa = [s for s in d["samples"] if s["epoch"] == ep and s["variant"] == e["a"]]
        sb = [s for s in d["samples"] if s["epoch"] == ep and s["variant"] == e["b"]]
        if sa and sb and len(sa) == len(sb) and all(s["tps"] > 0 for s in sa + sb):
            ga = math.exp(statistics.fmean(math.log(s["tps"]) for s in sa))
            gb = math.exp(statistics.fmean(math.log(s["tps"]) for s in sb))
            place = (tuple(sorted({str(s.get("server")) for s in sa})),
                     tuple(sorted({str(s.get("server")) for s in sb})))
            out.append((ga, gb, place))
    return out


def estimate(rows: list[tuple[float, float, tuple]]) -> tuple[float, float, float] | None:
    """(log effect, its se, half-width in %) as validate reports it."""
    if len(rows) < 3:
        return None
    e = paired_effect([a for a, _, _ in rows], [b for _, b, _ in rows], 1.0,
                      [p for _, _, p in rows])
    if not math.isfinite(e.lo_pct):
        return None
    lo, hi = math.log1p(e.lo_pct / 100), math.log1p(e.hi_pct / 100)
    m = math.log1p(e.pct / 100)
    return m, (hi - lo) / 2 / t975(e.df), (e.hi_pct - e.lo_pct) / 2


def summarise(ests: list[tuple[float, float, float]]) -> str:
    k = len(ests)
    w = [1 / se ** 2 for _, se, _ in ests]
    pooled = sum(wi * m for wi, (m, _, _) in zip(w, ests)) / sum(w)
    q = sum(wi * (m - pooled) ** 2 for wi, (m, _, _) in zip(w, ests))
    c = sum(w) - sum(wi ** 2 for wi in w) / sum(w)
    tau = math.sqrt(max(0.0, (q - (k - 1)) / c)) if c > 0 else 0.0
    hold = 0
    for i, (m, se, h) in enumerate(ests):
        ow = [wi for j, wi in enumerate(w) if j != i]
        other = sum(wi * ests[j][0] for j, wi in enumerate(w) if j != i) / sum(ow)
        half = math.log1p(h / 100)
        hold += m - half <= other <= m + half
    return (f"median half-width {statistics.median(h for _, _, h in ests):.2f}%, pooled "
            f"{math.expm1(pooled) * 100:+.2f}%, Q = {q:.1f} on {k - 1} df (p = "
            f"{chi2_sf(q, k - 1):.3f}), between-run sd {tau * 100:.2f}%, intervals holding "
            f"the others' pooled effect {hold} of {k}")


def main(paths: list[str]) -> int:
    groups: dict[str, list[tuple[str, list]]] = {}
    for p in paths:
        d = json.loads(Path(p).read_text())
        if not isinstance(d, dict) or d.get("meta", {}).get("design") != "simultaneous":
            continue
        rows = epochs(d)
        if len(rows) >= 6:
            name = re.sub(r"-\d+$", "", Path(p).stem)
            groups.setdefault(name, []).append((Path(p).stem, rows))
    print("| run | epochs | all epochs | without the first |")
    print("|---|---:|---|---|")
    for name, runs in groups.items():
        for stem, rows in runs:
            a, b = estimate(rows), estimate(rows[1:])
            print(f"| {stem} | {len(rows)} | " + " | ".join(
                f"{math.expm1(m) * 100:+.2f}% ± {h:.2f}" if x else "-"
                for x in (a, b) for m, _, h in [x or (0, 0, 0)]) + " |")
    for name, runs in groups.items():
        if len(runs) < 3:
            continue
        print(f"\n{name} ({len(runs)} runs)")
        for label, cut in (("all epochs", 0), ("without the first", 1)):
            ests = [e for _, rows in runs if (e := estimate(rows[cut:]))]
            print(f"  {label}: {summarise(ests)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
