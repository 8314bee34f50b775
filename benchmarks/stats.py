"""Statistics for A/B runs: paired effect on ln(TPS) with a Student t 95% confidence interval,
the stopping rule and the verdict words (docs/design.md, "Validating").

One block holds one run of every variant; the effect of B over A is built on the blocks'
ln(TPS_B / TPS_A), so slow drift of the machine cancels within a block: their mean, or where
the servers side by side trade placements the mean of a level (or a line over the run) per
placement, adjusted for the CPUs' speed where it moved (paired_effect). exp() turns it into a
percentage. Never stop on "p < 0.05": stop on the CI's half-width, or on the time budget.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from .adjust import adjusted
from .variants import THP_BASE, host_wide

# Two-sided 95% quantiles of Student's t (t_{0.975, df}), from standard tables (NIST/SEMATECH
# e-Handbook of Statistical Methods, 1.3.6.7.2).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
         16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
         23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
         30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t975(df: int) -> float:
    if df < 1:
        raise ValueError("need at least 2 paired samples")
    if df in _T975:
        return _T975[df]
    if df > 120:
        return 1.960 + (1.980 - 1.960) * 120 / df  # -> z as df grows; interpolate in 1/df
    lo = max(k for k in _T975 if k < df)
    hi = min(k for k in _T975 if k > df)
    w = (1 / df - 1 / hi) / (1 / lo - 1 / hi)
    return _T975[hi] + w * (_T975[lo] - _T975[hi])


@dataclass(frozen=True)
class Effect:
    n: int  # paired blocks
    pct: float  # point estimate, % change of B over A
    lo_pct: float
    hi_pct: float
    verdict: str
    # the server placements the interval was stratified by (paired_effect); 1: none
    strata: int = 1
    # whether each placement's level was fitted as a straight line over the run (paired_effect)
    drift: bool = False
    # the slope on the CPUs' speed the effect was adjusted with (paired_effect); None where
    # it was not adjusted
    speed_slope: float | None = None
    # how much the CPUs' speed ratio moved over the pairs: the sd of its logs, in percent;
    # None where some pair had no speed (nothing probed)
    speed_sd_pct: float | None = None
    # why the effect was not adjusted where every pair had a speed: "steady" (the speeds
    # moved under SPEED_MIN_SD), "few epochs" (under SPEED_MIN_DF degrees of freedom would
    # remain), "singular" (the speeds cannot be told from the placements' levels, or from
    # their lines over the run); None where it was adjusted or nothing was probed
    speed_unfit: str | None = None

    @property
    def df(self) -> int:
        """The degrees of freedom of the interval's t (paired_effect): n - 1 for the plain t,
        n - k for a level per placement, n - 2k for a line per placement; one less where the
        effect was adjusted for the CPUs' speed."""
        base = self.n - 1 if self.strata < 2 else self.n - self.strata * (2 if self.drift else 1)
        return base - (self.speed_slope is not None)

    @property
    def half_width_pct(self) -> float:
        return (self.hi_pct - self.lo_pct) / 2


def verdict(pct: float, lo: float, hi: float, band: float) -> str:
    """improved / regressed: the CI excludes 0 and the estimate lies beyond the noise band;
    no meaningful change: the whole CI lies inside the band; inconclusive otherwise."""
    if lo > 0 and pct > band:
        return "improved"
    if hi < 0 and pct < -band:
        return "regressed"
    if lo >= -band and hi <= band:
        return "no meaningful change"
    return "inconclusive"


# Each placement holds at least this many epochs before its level is fitted as a line over the
# run: two more parameters cost width where the level stays put (the t quantile on n - 4
# instead of n - 2 degrees of freedom), simulated 4% at six epochs a placement, 1% at 17
# epochs in all, but 8% at five and 13% at four (lab/strata_sim.py; lab/README.md, "A line
# per placement over the run").
DRIFT_MIN_EPOCHS = 6

# The CPUs' speed is fitted (adjust.py) only where this many degrees of freedom remain after
# it, decided by the count of epochs alone, before their values are seen: one degree of
# freedom fewer widens the t quantile by 3.5% at 6 (2.447 against 2.365 at 7) and more below,
# while the adjustment halved the standard error where the CPUs' speeds moved (lab/README.md,
# "The CPUs' own speed as a covariate").
SPEED_MIN_DF = 6
# ... and only where the covariate itself moved: the sd of the pairs' ln speed ratios at least
# this much (a rule on the covariate alone, decided before the effect is looked at: where it
# adjusts, the regression's interval given the covariate stays exact; where it does not, the
# little the speeds moved counts as noise, lab/speed_sim.py). Where it explains
# nothing, the slope costs 4% of width at 17 epochs and 8% at 11 (lab/speed_sim.py); it takes
# slope^2 sd_z^2 out of the epoch variance, so it pays only where slope x sd_z reaches about
# 0.3-0.4 of the epochs' own sd; with the slope near 1 where the CPUs moved (0.86-1.09) and
# epochs of 1.0-1.6% sd within a placement where they ran steadily, that is sd_z of
# 0.3-0.6%. Of the fifteen runs recorded with sd_z under 0.5%, eleven came out 2-10% wider
# adjusted, one the same and three 1-5% narrower; between 0.55% and 0.99%, four narrower by
# 3-18% and one 13% wider; at 1.25-2.7%, 38-55% narrower (lab/README.md, "The CPUs' own
# speed as a covariate" and "Ten runs back to back with the probe").
SPEED_MIN_SD = 0.005


def paired_effect(a: list[float], b: list[float], band_pct: float = 1.0,
                  strata: list | None = None, times: list[float] | None = None,
                  speed: list[float | None] | None = None,
                  speed_min_sd: float = SPEED_MIN_SD) -> Effect:
    """B over A from paired TPS: the mean of ln(b/a) with a Student t 95% interval.

    `strata` (one key per pair: which server each side ran on, side by side) is a factor the
    design balances by turning the servers from epoch to epoch. A server faster than the
    other (the loaded original against its copy, the placement of its memory) then moves
    every epoch's ratio by the same amount in turn: the plain mean cancels it, but its
    interval counts it as noise. Where every stratum holds at least two pairs, the effect is
    the mean of the strata's means (each placement weighted alike) and the interval takes
    the pooled within-stratum variance on n - k degrees of freedom: the ln ratios as a
    one-way layout by placement, the effect a contrast of its means with variance
    s^2 / k^2 x sum(1 / n_i) (Montgomery, Design and Analysis of Experiments, 8th ed., 3.5;
    lab/README.md, "Server placement as strata", simulates its coverage). Otherwise, or with
    one stratum, the plain paired t.

    The servers' difference need not stay put over a run: a copy can grow slower from some
    epoch on. Where every stratum holds DRIFT_MIN_EPOCHS pairs or more, each stratum's level
    is a straight line in `times` (the pairs' epochs, in order where not given): separate
    regression lines, the analysis of covariance with a slope per group (Montgomery 15.3).
    The effect is the mean of the lines' values at the run's mean time, each with variance
    s^2 x (1 / n_i + (T - t_i)^2 / S_tt,i) (the fitted mean response of a simple regression:
    Montgomery, Peck and Vining, Introduction to Linear Regression Analysis, 5th ed., 2.4.2),
    s^2 the pooled residual variance on n - 2k degrees of freedom.

    `speed` (one per pair: ln of the speed of the CPUs B's runs sat on over A's, speed.py):
    where every pair has one, SPEED_MIN_DF degrees of freedom remain and the ratios moved
    (speed_min_sd, SPEED_MIN_SD unless a study sets another), the model above takes a common
    slope on it too and the effect is its value at equal speeds (adjust.py). Where the speeds
    were read but not used, Effect.speed_unfit says why."""
    if len(a) != len(b):
        raise ValueError("paired samples need equal lengths")
    keys = strata if strata is not None else [None] * len(a)
    when = times if times is not None else list(range(len(a)))
    zs = speed if speed is not None else [None] * len(a)
    d = [(k, t, math.log(y / x), z) for x, y, k, t, z in zip(a, b, keys, when, zs)
         if x > 0 and y > 0]
    n = len(d)
    if n == 0:
        return Effect(0, math.nan, math.nan, math.nan, "inconclusive")
    mean = sum(x for _, _, x, _ in d) / n
    at = sum(t for _, t, _, _ in d) / n
    if n < 2:
        pct = (math.exp(mean) - 1) * 100
        return Effect(n, pct, -math.inf, math.inf, "inconclusive")
    groups: dict = {}  # placement -> [(time, ln ratio, ln speed ratio)]
    for key, t, x, z in d:
        groups.setdefault(key, []).append((t, x, z))
    k = len(groups)
    drift = k > 1 and all(len({t for t, _, _ in g}) >= DRIFT_MIN_EPOCHS
                          for g in groups.values())
    if drift:
        mean, se, df = _lines(groups, at, n)
    elif k > 1 and all(len(g) >= 2 for g in groups.values()):
        means = {key: sum(x for _, x, _ in g) / len(g) for key, g in groups.items()}
        mean = sum(means.values()) / k
        ss = sum((x - means[key]) ** 2 for key, g in groups.items() for _, x, _ in g)
        sd, df = math.sqrt(ss / (n - k)), n - k
        se = sd / k * math.sqrt(sum(1 / len(g) for g in groups.values()))
    else:
        k, df = 1, n - 1
        sd = math.sqrt(sum((x - mean) ** 2 for _, _, x, _ in d) / df)
        se = sd / math.sqrt(n)
        groups = {None: [(t, x, z) for _, t, x, z in d]}
    slope, unfit = None, None
    zs = [z for *_, z in d]
    zsd = statistics.stdev(zs) if None not in zs else None
    if zsd is not None:
        unfit = ("steady" if zsd < speed_min_sd or zsd == 0
                 else "few epochs" if df - 1 < SPEED_MIN_DF else None)
        fit = adjusted(groups, drift, at) if unfit is None else None
        if fit is not None:
            mean, se, df, slope = fit
        elif unfit is None:
            unfit = "singular"
    h = t975(df) * se
    pct, lo, hi = ((math.exp(v) - 1) * 100 for v in (mean, mean - h, mean + h))
    return Effect(n, pct, lo, hi, verdict(pct, lo, hi, band_pct), strata=k, drift=drift,
                  speed_slope=None if slope is None else round(slope, 3),
                  speed_sd_pct=None if zsd is None else round(100 * zsd, 3),
                  speed_unfit=unfit)


def _lines(groups: dict, at: float, n: int) -> tuple[float, float, int]:
    """Separate regression lines, one per stratum (paired_effect; its groups, (time, ln
    ratio, z) each): the mean of their values at time `at`, its standard error and degrees
    of freedom."""
    k = len(groups)
    level, coef, ss = 0.0, 0.0, 0.0
    for g in groups.values():
        mt = sum(t for t, _, _ in g) / len(g)
        mx = sum(x for _, x, _ in g) / len(g)
        stt = sum((t - mt) ** 2 for t, _, _ in g)
        slope = sum((t - mt) * (x - mx) for t, x, _ in g) / stt
        level += mx + slope * (at - mt)
        coef += 1 / len(g) + (at - mt) ** 2 / stt
        ss += sum((x - mx - slope * (t - mt)) ** 2 for t, x, _ in g)
    df = n - 2 * k
    return level / k, math.sqrt(ss / df * coef) / k, df


def geomean(values: list[float]) -> float:
    """Geometric mean: the mean on the ln scale the effects are computed on."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def should_stop(effects: list[Effect], target_pct: float | None, min_blocks: int = 3) -> bool:
    """Every comparison has reached the target half-width (and enough blocks to trust it);
    never when no target is set (the default: the whole budget is used).

    Stopping on the interval's own width is optional stopping: it ends runs whose sample sd
    happens to be small, so the final t interval covers less than its nominal 95%. Simulated
    for this rule (normal epoch ratios, true effect 0, target 1%, at least 3 epochs;
    lab/stopping_sim.py, results in lab/README.md): up to 8% of intervals miss the
    true effect with at most 6 epochs, up to ~10% with 30, against 5% for a fixed number of
    epochs. Hence opt-in only."""
    return target_pct is not None and bool(effects) and all(
        e.n >= min_blocks and e.half_width_pct <= target_pct for e in effects)


def measured_seconds(samples: list, warm_s: float, run_s: float) -> float:
    """Wall seconds during which some run measured: each run's measured part (its start plus
    the warm-up, for run_s seconds) merged where runs overlap (side by side, two runs measure
    at the same moment and count once)."""
    spans = sorted((s.started + warm_s, s.started + warm_s + run_s) for s in samples
                   if s.started is not None)
    total, end = 0.0, float("-inf")
    for lo, hi in spans:
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return math.nan
    k = max(0, math.ceil(p / 100 * len(sorted_values)) - 1)
    return sorted_values[k]


def unit(s) -> int:
    """The paired unit a sample belongs to: its epoch (one start of every variant's server;
    a block in the restart design)."""
    return s.epoch if s.epoch is not None else s.block


def effects(samples: list, pairs: list[tuple[str, str]], band_pct: float,
            speed_min_sd: float = SPEED_MIN_SD) -> dict[tuple[str, str], Effect]:
    """B over A per pair, one paired unit per epoch: the geometric mean of the epoch's runs
    of each variant. Runs within one start of a server share its memory layout, so they are
    not independent of each other; epochs are (docs/design.md, "Validating")."""
    out = {}
    epochs = sorted({unit(s) for s in samples})
    for a, b in pairs:
        ta, tb, placed, when, z = [], [], [], [], []
        for ep in epochs:
            sa = [s for s in samples if unit(s) == ep and s.variant == a]
            sb = [s for s in samples if unit(s) == ep and s.variant == b]
            if sa and sb and len(sa) == len(sb):
                ta.append(geomean([s.tps for s in sa]))
                tb.append(geomean([s.tps for s in sb]))
                placed.append(placement(sa, sb))
                when.append(ep)
                z.append(speed_ratio(sa, sb))
        out[(a, b)] = paired_effect(ta, tb, band_pct, placed, when, z, speed_min_sd)
    return out


def speed_ratio(sa: list, sb: list) -> float | None:
    """ln of the speed of the CPUs B's runs of one unit sat on over A's (geometric means over
    the runs, as their TPS), the covariate paired_effect adjusts for; None where a run has
    no speed (speed.py)."""
    speeds = [s.cpu_speed for s in sa + sb]
    if any(v is None or v <= 0 for v in speeds):
        return None
    return math.log(geomean(speeds[len(sa):]) / geomean(speeds[:len(sa)]))


def placement(sa: list, sb: list) -> tuple:
    """Which servers A's and B's runs of one unit ran on (side by side; (None, None) where
    each run restarts the one server): the stratum of the unit's ratio (paired_effect)."""
    return (tuple(sorted({s.server for s in sa}, key=str)),
            tuple(sorted({s.server for s in sb}, key=str)))


def phase_samples(samples: list, phases: list[str]) -> list:
    """Side by side with THP phases (variants.phases_for): a THP variant's runs are those of
    the THP_BASE server in its phase, their unit the cycle (one epoch per phase), so that a
    THP comparison pairs the phases of one cycle."""
    k = len(phases)
    return [replace(s, variant=s.phase, epoch=unit(s) // k) for s in samples
            if phases and s.variant == THP_BASE and s.phase]


def comparisons(samples: list, pairs: list[tuple[str, str]], phases: list[str],
                band_pct: float, speed_min_sd: float = SPEED_MIN_SD
                ) -> dict[tuple[str, str], Effect]:
    """Every comparison's effect. With THP phases, the pairs of per-server variants over
    every epoch (whatever its phase: they ran side by side in it), and the pairs with a THP
    variant over cycles (phase_samples). Without, all over epochs. speed_min_sd:
    paired_effect's."""
    thp = [p for p in pairs if phases and any(map(host_wide, p))]
    out = effects(samples, [p for p in pairs if p not in thp], band_pct, speed_min_sd)
    out.update(effects(phase_samples(samples, phases), thp, band_pct, speed_min_sd))
    return {p: out[p] for p in pairs}


def by_phase(samples: list, pairs: list[tuple[str, str]], phases: list[str],
             band_pct: float) -> dict[tuple[str, str], dict[str, dict]]:
    """The comparisons of per-server variants within each THP phase alone: whether the effect
    depends on the THP setting it was measured under (the pooled one is in comparisons)."""
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for ph in phases:
        mine = [s for s in samples if s.phase == ph]
        for p, e in effects(mine, [p for p in pairs if not any(map(host_wide, p))],
                            band_pct).items():
            out.setdefault(p, {})[ph] = {"n": e.n, "pct": e.pct, "lo_pct": e.lo_pct,
                                         "hi_pct": e.hi_pct}
    return out


def summary(samples: list) -> dict:
    """One variant's runs: TPS mean and its 95% CI, latency percentiles and what the memory
    sat on (medians over the runs)."""
    if not samples:
        return {"runs": 0}
    tps = [s.tps for s in samples]
    mean = sum(tps) / len(tps)
    sd = math.sqrt(sum((x - mean) ** 2 for x in tps) / (len(tps) - 1)) if len(tps) > 1 else 0.0
    h = t975(len(tps) - 1) * sd / math.sqrt(len(tps)) if len(tps) > 1 else math.nan

    def med(key):
        vals = sorted(getattr(s, key) for s in samples if getattr(s, key) is not None)
        return vals[len(vals) // 2] if vals else None

    return {"runs": len(tps), "tps_mean": mean, "tps_ci95": h, "p50_ms": med("p50_ms"),
            "p95_ms": med("p95_ms"), "p99_ms": med("p99_ms"),
            "page_tables_kb": med("page_tables_kb"), "anon_huge_kb": med("anon_huge_kb"),
            "shmem_huge_kb": med("shmem_huge_kb"),
            "steal_pct_max": max((s.steal_pct for s in samples if s.steal_pct is not None),
                                 default=None),
            "backing": samples[-1].backing}


def finite(obj):
    """`obj` with every NaN or infinity (an effect of fewer than two epochs has no interval:
    paired_effect) written as null: JSON has no NaN (RFC 8259, section 6), and strict parsers
    (JSON.parse, jq) refuse the document that holds one. The writer then dumps with
    allow_nan=False, so one that slips through is an error, never a document."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj
