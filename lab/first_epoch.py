#!/usr/bin/env python3
"""Is a run's first epoch like its others? For each side-by-side run (`validate --json
--output`), the first epoch's log ratio (recommended over current) against the later epochs
with recommended on the same server (the same placement stratum; all later epochs where the
run does not record servers): the difference, and z, that difference in the later epochs'
sd. Under exchangeable epochs |z| > 2 comes about 5% of the time (a t with the later epochs'
df comes a little more often).

    python3 lab/first_epoch.py RUN.json ...

Standard library only."""

from __future__ import annotations

import json
import math
import statistics
import sys


def pairs(d: dict) -> list[tuple[float, object]]:
    """(log ratio, recommended's server) per epoch with both variants, in epoch order."""
    by: dict[int, dict] = {}
    for s in d.get("samples", []):
        if s.get("variant") in ("current", "recommended") and "epoch" in s:
            by.setdefault(s["epoch"], {}).setdefault(s["variant"], []).append(s)
    out = []
    for ep in sorted(by):
        v = by[ep]
        if len(v) == 2:
            cur = statistics.mean(s["tps"] for s in v["current"])
            rec = statistics.mean(s["tps"] for s in v["recommended"])
            out.append((math.log(rec / cur), v["recommended"][0].get("server")))
    return out


def main(paths: list[str]) -> None:
    zs = []
    print("| run | epochs | recommended's server in epoch 1 | first - later (same server) | z |")
    print("|---|---:|---:|---:|---:|")
    for p in paths:
        d = json.load(open(p))
        if not isinstance(d, dict) or d.get("meta", {}).get("design") != "simultaneous":
            continue
        e = pairs(d)
        if len(e) < 4:
            continue
        (first, srv), later = e[0], e[1:]
        same = [lr for lr, s in later if s == srv] if srv is not None else [lr for lr, _ in later]
        if len(same) < 2 or statistics.stdev(same) == 0:
            continue
        diff = first - statistics.mean(same)
        z = diff / statistics.stdev(same)
        zs.append(z)
        print(f"| {p.rsplit('/', 1)[-1]} | {len(e)} | {srv if srv is not None else '-'} | "
              f"{diff * 100:+.2f}% | {z:+.2f} |")
    if zs:
        print(f"\n{len(zs)} runs: |z| > 2 in {sum(abs(z) > 2 for z in zs)}, z < -2 in "
              f"{sum(z < -2 for z in zs)}, z > 2 in {sum(z > 2 for z in zs)}")


if __name__ == "__main__":
    main(sys.argv[1:])
