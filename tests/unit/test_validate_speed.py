"""validate's adjustment for the CPUs' own speed: the least squares (adjust.py) against
answers worked independently (the plain and the one-way analysis of covariance by their
textbook formulas), when paired_effect adjusts and when it does not, the runs' speeds read
off a probe's readings through the trades of the simultaneous design (speed.run_speeds),
and the words the report gives it."""

import math
import statistics

from dataclasses import replace

import pytest

from hpadvise.benchmarks import adjust, measure, speed, stats, wording

# Epoch ln ratios as a side-by-side A/A on this VM gave them: the CPUs' speed ratio z moving
# each epoch by a couple of percent, the ratio following it with slope 0.9, and a little
# noise of the servers' own
Z = [0.021, -0.034, 0.008, 0.027, -0.015, -0.002, 0.031, -0.026, 0.012, -0.009, 0.018,
     -0.021, 0.004, -0.030, 0.025, -0.006, 0.015]
NOISE = [0.003, -0.004, 0.002, -0.001, 0.004, -0.003, 0.001, 0.002, -0.002, 0.003, -0.001,
         0.0, -0.003, 0.002, -0.002, 0.004, -0.004]
EFFECT = 0.01


def _ratios(slope=0.9):
    return [math.exp(EFFECT + slope * z + e) for z, e in zip(Z, NOISE)]


def test_ols_recovers_an_exact_line():
    rows = [[1.0, z] for z in Z]
    beta, inv, rss = adjust.ols(rows, [0.02 + 0.75 * z for z in Z])
    assert beta == pytest.approx([0.02, 0.75]) and rss == pytest.approx(0, abs=1e-20)
    assert adjust.ols([[1.0, 0.0]] * 4, [0.1, 0.2, 0.1, 0.2]) is None  # z never varies


def test_plain_model_matches_the_textbook_ancova():
    """One placement: the effect is ybar - b zbar with b = Szy / Szz, its variance
    s^2 (1/n + zbar^2 / Szz) on n - 2 degrees of freedom."""
    y = [math.log(r) for r in _ratios()]
    n = len(y)
    zb, yb = sum(Z) / n, sum(y) / n
    szz = sum((z - zb) ** 2 for z in Z)
    b = sum((z - zb) * (v - yb) for z, v in zip(Z, y)) / szz
    a = yb - b * zb
    s2 = sum((v - a - b * z) ** 2 for z, v in zip(Z, y)) / (n - 2)
    mean, se, df, slope = adjust.adjusted({None: [(i, v, z) for i, (v, z) in
                                                  enumerate(zip(y, Z))]}, False, 0)
    assert (mean, slope, df) == (pytest.approx(a), pytest.approx(b), n - 2)
    assert se == pytest.approx(math.sqrt(s2 * (1 / n + zb * zb / szz)))


def test_placements_model_matches_the_one_way_ancova():
    """Two placements, a level each and a common slope: b from the pooled within-placement
    sums, each level ybar_j - b zbar_j, the effect their mean (Montgomery 15.3)."""
    y = [math.log(r) + (0.04 if i % 2 else -0.04) for i, r in enumerate(_ratios())]
    groups = {}
    for i, (v, z) in enumerate(zip(y, Z)):
        groups.setdefault(i % 2, []).append((i, v, z))
    szz = szy = 0.0
    means = {}
    for k, g in groups.items():
        zb = sum(z for _, _, z in g) / len(g)
        yb = sum(v for _, v, _ in g) / len(g)
        means[k] = (zb, yb)
        szz += sum((z - zb) ** 2 for _, _, z in g)
        szy += sum((z - zb) * (v - yb) for _, v, z in g)
    b = szy / szz
    effect = sum(yb - b * zb for zb, yb in means.values()) / 2
    mean, _, df, slope = adjust.adjusted(groups, False, 0)
    assert (mean, slope, df) == (pytest.approx(effect), pytest.approx(b), len(y) - 3)


def test_paired_effect_adjusted_narrows_and_stays_on_the_effect():
    b = _ratios()
    plain = stats.paired_effect([1.0] * len(b), b, 1.0, [i % 2 for i in range(len(b))])
    adj = stats.paired_effect([1.0] * len(b), b, 1.0, [i % 2 for i in range(len(b))],
                              speed=Z)
    assert plain.speed_slope is None and adj.speed_slope == pytest.approx(0.9, abs=0.1)
    assert adj.df == plain.df - 1 == len(b) - 4 - 1  # a line per placement, and the slope
    assert adj.half_width_pct < plain.half_width_pct / 3
    assert adj.lo_pct < (math.exp(EFFECT) - 1) * 100 < adj.hi_pct


@pytest.mark.parametrize("speed", [
    [0.01, -0.02, 0.0, 0.02, -0.01, 0.01, 0.0],   # 7 epochs: 5 degrees of freedom after it
    Z[:6] + [None] + Z[7:],                       # a run without a reading
    [z / 5 for z in Z],                           # CPUs that barely moved: sd 0.4%
])
def test_not_adjusted_where_too_few_epochs_a_run_unread_or_the_speeds_steady(speed):
    b = _ratios()[:len(speed)]
    e = stats.paired_effect([1.0] * len(b), b, 1.0, speed=speed)
    assert e.speed_slope is None
    assert replace(e, speed_sd_pct=None, speed_unfit=None) == stats.paired_effect(
        [1.0] * len(b), b, 1.0)
    assert (e.speed_sd_pct is None) == (None in speed)
    assert e.speed_unfit == (None if None in speed else "few epochs" if len(speed) < 17
                             else "steady")


def test_speeds_in_step_with_the_placements_are_not_adjusted_and_the_report_says_so():
    """Each placement's runs all at one speed ratio (+-1%): the slope is the placements'
    difference again, the fit singular; the effect stays the stratified one."""
    b = _ratios()
    keys = [i % 2 for i in range(len(b))]
    e = stats.paired_effect([1.0] * len(b), b, strata=keys,
                            speed=[0.01 if k else -0.01 for k in keys])
    assert e.speed_slope is None and e.speed_unfit == "singular" and e.speed_sd_pct > 0.5
    assert replace(e, speed_sd_pct=None, speed_unfit=None) == stats.paired_effect(
        [1.0] * len(b), b, strata=keys)
    words = wording.strata_words({"strata": 2, "speed_slope": None,
                                  "speed_sd_pct": e.speed_sd_pct, "speed_unfit": "singular"})
    assert "placements" in words and "not adjusted" in words and "Too few" not in words


def test_a_study_may_set_its_own_threshold():
    """speed_min_sd: the lab's studies try other thresholds without touching the rule."""
    b = _ratios()
    low = [z / 5 for z in Z]
    assert stats.paired_effect([1.0] * len(b), b, speed=low).speed_slope is None
    assert stats.paired_effect([1.0] * len(b), b, speed=low,
                               speed_min_sd=0.0).speed_slope is not None
    still = stats.paired_effect([1.0] * len(b), b, speed=[0.01] * len(b), speed_min_sd=0.0)
    assert still.speed_slope is None and still.speed_unfit == "steady"


def test_adjusted_from_the_speeds_spread_on():
    """The rule reads the covariate alone: the same ratios, speeds at sd just over
    SPEED_MIN_SD adjusted, just under not."""
    b = _ratios()
    sd = statistics.stdev(Z)
    over = stats.paired_effect([1.0] * len(b), b, speed=[z * 0.0051 / sd for z in Z])
    under = stats.paired_effect([1.0] * len(b), b, speed=[z * 0.0049 / sd for z in Z])
    assert over.speed_slope is not None and under.speed_slope is None


def test_speeds_ride_the_samples_into_the_comparison():
    samples = []
    for ep, (r, z) in enumerate(zip(_ratios(), Z)):
        for v, tps, s in (("current", 1000.0, 40.0), ("current#2", 1000.0 * r,
                                                       40.0 * math.exp(z))):
            samples.append(measure.Sample(ep, v, tps, None, 1, 2, 3, None, None, None, None,
                                          "4k", {}, epoch=ep, cpu_speed=s))
    [e] = stats.comparisons(samples, [("current", "current#2")], [], 1.0).values()
    assert e.speed_slope == pytest.approx(0.9, abs=0.1)


def test_run_speeds_follow_the_trades():
    """CPU 0 at e^1 turns a microsecond, CPU 1 at e^2; readings every 0.1 s from 0 to 40 s
    after the clients started; 3 s of warm-up, 30 measured, trades every 3 s: each server
    spends half of its measured part on each CPU. Pinned without trades, each keeps its
    own; not pinned, it has both. Speeds are kept to four decimals."""
    readings = {c: [(100 + i / 10, float(c + 1)) for i in range(400)] for c in (0, 1)}
    traded = speed.run_speeds(readings, [[0], [1]], 100.0, 3, 30, 3.0)
    assert traded == [pytest.approx(math.exp(1.5), rel=0.01)] * 2
    assert speed.run_speeds(readings, [[0], [1]], 100.0, 3, 30, 0) == [
        pytest.approx(math.e, rel=1e-4), pytest.approx(math.exp(2), rel=1e-4)]
    assert speed.run_speeds(readings, [None], 100.0, 3, 30, 0) == [
        pytest.approx(math.exp(1.5), rel=0.01)]
    assert speed.run_speeds({}, [[0], [1]], 100.0, 3, 30, 3.0) == [None, None]


def test_the_report_names_the_adjustment():
    e = {"strata": 2, "drift": True, "speed_slope": 0.86}
    assert "analysis of covariance, slope 0.86" in wording.strata_words(e)
    assert "covariance" not in wording.strata_words({**e, "speed_slope": None})
    assert "covariance" in wording.strata_words({"strata": 1, "speed_slope": 0.5})


def test_the_report_says_why_it_did_not_adjust():
    """Speeds read but steady: how much they moved and the rule's threshold; moving but too
    few epochs: that; nothing read: nothing said. (In step with the placements: the test
    above.) A result written before the reason was kept: steady where its spread shows it,
    else nothing, never a reason it did not record."""
    steady = wording.strata_words({"strata": 2, "speed_slope": None, "speed_sd_pct": 0.24,
                                   "speed_unfit": "steady"})
    assert "moved 0.24%" in steady and "0.5%" in steady and "not adjusted" in steady
    few = wording.strata_words({"strata": 1, "speed_slope": None, "speed_sd_pct": 1.9,
                                "speed_unfit": "few epochs"})
    assert "Too few epochs" in few and "6 degrees of freedom" in few
    assert "CPU" not in wording.strata_words({"strata": 1, "speed_slope": None,
                                              "speed_sd_pct": None, "speed_unfit": None})
    older = {"strata": 2, "speed_slope": None}
    assert "moved 0.24%" in wording.strata_words({**older, "speed_sd_pct": 0.24})
    assert "CPU" not in wording.strata_words({**older, "speed_sd_pct": 1.9})
    b = _ratios()
    e = stats.paired_effect([1.0] * len(b), b, speed=[z / 5 for z in Z])
    assert e.speed_sd_pct == pytest.approx(100 * statistics.stdev(Z) / 5, abs=1e-3)
    assert "not adjusted" in wording.strata_words(
        {"strata": e.strata, "speed_slope": e.speed_slope, "speed_sd_pct": e.speed_sd_pct,
         "speed_unfit": e.speed_unfit})


def test_probed_caps_each_group_and_spreads_through_it():
    """Two groups of 64 CPUs: four of each, at even steps; small groups whole; a run that is
    not pinned gets PER_GROUP per run from all our CPUs."""
    big = [list(range(0, 64)), list(range(64, 128))]
    assert speed.probed(big) == [0, 16, 32, 48, 64, 80, 96, 112]
    assert speed.probed([[0], [1]]) == [0, 1]
    assert speed.probed([[3, 1, 2], [5, 4, 6]]) == [1, 2, 3, 4, 5, 6]
    assert speed.spread(list(range(10)), 3) == [0, 3, 6]
    assert speed.probed([None, None]) == speed.spread(speed.ALL_CPUS, 2 * speed.PER_GROUP)
