#!/usr/bin/env python3
"""What the adjustment for the CPUs' speed did to recorded runs: each comparison of each
`validate --json --output` file recomputed by validate's own statistics
(stats.comparisons) with the runs' `cpu_speed` as recorded and with it taken out, side by
side, and the spread of the epochs' speed log ratios (the covariate).

    .venv/bin/python lab/validate_speed.py RUN.json [RUN.json ...]

Standard library only, beside hpadvise itself."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from hpadvise.benchmarks import measure, stats
from hpadvise.benchmarks.variants import pairs_for


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
            z = "-" if e1.speed_sd_pct is None else f"{e1.speed_sd_pct:.2f}%"
            print(f"| {path.rsplit('/', 1)[-1]} | {p[1]} over {p[0]} | {e1.n} | "
                  f"{e0.pct:+.2f}%, {e0.lo_pct:+.2f} .. {e0.hi_pct:+.2f} | "
                  f"{e0.half_width_pct:.2f}% | {e1.pct:+.2f}%, {e1.lo_pct:+.2f} .. "
                  f"{e1.hi_pct:+.2f} | {e1.half_width_pct:.2f}% | {e1.speed_slope} | {z} | "
                  f"{'adjusted' if decided[p].speed_slope is not None else 'unadjusted'} |")


if __name__ == "__main__":
    main()
