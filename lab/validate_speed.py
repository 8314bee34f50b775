#!/usr/bin/env python3
"""What the adjustment for the CPUs' speed did to recorded runs: each comparison of each
`validate --json --output` file recomputed by validate's own statistics
(stats.comparisons) with the runs' `cpu_speed` as recorded and with it taken out, side by
side, and the spread of the epochs' speed log ratios (the covariate).

    .venv/bin/python lab/validate_speed.py RUN.json [RUN.json ...]

Standard library only, beside hpadvise itself."""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace

from hpadvise.benchmarks import measure, stats
from hpadvise.benchmarks.variants import host_wide, pairs_for


def main() -> None:
    print("| run | comparison | n | unadjusted, 95% CI | half-width | adjusted, 95% CI | "
          "half-width | slope | sd of z | reported |")
    print("|---|---|---:|---|---:|---|---:|---:|---:|---|")
    for path in sys.argv[1:]:
        r = json.load(open(path))
        m = r["meta"]
        probed = [measure.Sample.of(s) for s in r["samples"]]
        plain = [replace(s, cpu_speed=None) for s in probed]
        pairs = pairs_for(m["variants"])
        phases = m.get("phases") or []
        was = stats.comparisons(plain, pairs, phases, m["band_pct"])
        now = stats.comparisons(probed, pairs, phases, m["band_pct"], speed_min_sd=0.0)
        decided = stats.comparisons(probed, pairs, phases, m["band_pct"])
        for p in pairs:
            e0, e1 = was[p], now[p]
            z = z_spread(stats.phase_samples(probed, phases)
                         if phases and any(map(host_wide, p)) else probed, p)
            print(f"| {path.rsplit('/', 1)[-1]} | {p[1]} over {p[0]} | {e1.n} | "
                  f"{e0.pct:+.2f}%, {e0.lo_pct:+.2f} .. {e0.hi_pct:+.2f} | "
                  f"{e0.half_width_pct:.2f}% | {e1.pct:+.2f}%, {e1.lo_pct:+.2f} .. "
                  f"{e1.hi_pct:+.2f} | {e1.half_width_pct:.2f}% | {e1.speed_slope} | {z} | "
                  f"{'adjusted' if decided[p].speed_slope is not None else 'unadjusted'} |")


def z_spread(samples: list, pair: tuple[str, str]) -> str:
    """The sd of the epochs' ln(speed B / speed A), in %: how much the covariate moved."""
    by: dict = {}
    for s in samples:
        by.setdefault(stats.unit(s), {}).setdefault(s.variant, []).append(s)
    zs = [stats.speed_ratio(d[pair[0]], d[pair[1]]) for d in by.values()
          if pair[0] in d and pair[1] in d]
    zs = [z for z in zs if z is not None]
    return f"{100 * statistics.stdev(zs):.2f}%" if len(zs) > 1 else "-"


if __name__ == "__main__":
    main()
