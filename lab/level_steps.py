"""The steps between a run's neighbouring generations (lab/server_level.py), read by what was
done before each: whether an action draws a level anew (steps), and at swaps whether the
level went with the directories or stayed with the harness's roles (swaps)."""

from __future__ import annotations

import math
import statistics

from f_dist import f_sf


def steps(levels: list, actions: list[str], sd: float, dof: int) -> None:
    """Each step between neighbouring generations as z (over the standard error noise alone
    gives it), grouped by the action done before the later one. A level that an action draws
    anew makes its steps' mean z² larger than the steps with nothing done; F is the ratio of
    the two mean z², on (steps of the action, steps with none) degrees of freedom (a ratio of
    two chi-squares over their df, taking the noise's sd as known: dof residuals)."""
    by: dict[str, list[float]] = {}
    raw: dict[str, list[float]] = {}
    for (m0, s0), (m1, s1), act in zip(levels, levels[1:], actions[1:]):
        by.setdefault(act, []).append((m1 - m0) / (sd * math.sqrt(s0 + s1)))
        raw.setdefault(act, []).append(m1 - m0)
    if "none" not in by or len(by) < 2:
        return
    base = statistics.fmean(z * z for z in by["none"])
    if base == 0:  # only where every step with nothing done was exactly zero
        print("steps: the steps with nothing done are all zero, no ratio to take")
        return
    print(f"steps as z by the action before them ({dof} residual df for the noise):")
    for act, zs in sorted(by.items()):
        mz = statistics.fmean(z * z for z in zs)
        line = f"  {act:6} {len(zs):2} steps, mean z\u00b2 {mz:.2f}, rms step " \
            f"{math.sqrt(statistics.fmean(s * s for s in raw[act])):.2f}%"
        if act != "none":
            line += (f", against none: F = {mz / base:.2f} on ({len(zs)}, {len(by['none'])}) "
                     f"df, p = {f_sf(mz / base, len(zs), len(by['none'])):.3f}")
        print(line)


def swaps(levels: list[float], actions: list[str], xline: list[int]) -> None:
    """At each swap, how far X over Y moved and how far the loaded directory over its copy
    did: a level the harness's roles carry stays in X over Y and turns in the other; one the
    directories carry, the other way round. The steps with nothing done show how far either
    moves on its own."""
    for act in ("swap", "none"):
        xy, lc = [], []
        for (m0, m1), a, x0, x1 in zip(zip(levels, levels[1:]), actions[1:], xline, xline[1:]):
            if a == act:
                xy.append(m1 - m0)
                lc.append((m1 if x1 == 0 else -m1) - (m0 if x0 == 0 else -m0))
        if xy:
            rms = [math.sqrt(statistics.fmean(v * v for v in s)) for s in (xy, lc)]
            print(f"  at {act:4} ({len(xy)} steps): X over Y moved by {rms[0]:.2f}% (rms), "
                  f"the loaded directory over its copy by {rms[1]:.2f}%")
