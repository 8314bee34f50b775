"""validate's interval stratified by server placement (stats.paired_effect): known answers
worked by hand (a level per placement, and a line per placement over the run), the
fall-back to the plain paired t, and the placements read off the samples of a side-by-side
run, THP phases included."""

import json
import math
import unittest.mock
from pathlib import Path

import pytest

from hpadvise.benchmarks import measure, stats, wording


def test_stratified_known_answer():
    """Placement p: ln ratios 0.1, 0.3; placement q: 0.0, 0.2, 0.4. Means 0.2 and 0.2, the
    effect their mean 0.2; pooled within-placement SS 0.02 + 0.08 = 0.1 on 5 - 2 = 3 df;
    se = sqrt(0.1 / 3) / 2 x sqrt(1/2 + 1/3); half-width t(0.975, 3) = 3.182 times it."""
    d = [0.1, 0.0, 0.3, 0.2, 0.4]
    keys = ["p", "q", "p", "q", "q"]
    e = stats.paired_effect([1.0] * 5, [math.exp(x) for x in d], 1.0, keys)
    se = math.sqrt(0.1 / 3) / 2 * math.sqrt(1 / 2 + 1 / 3)
    assert e.strata == 2 and e.n == 5 and e.df == 3
    assert e.pct == pytest.approx((math.exp(0.2) - 1) * 100)
    assert e.lo_pct == pytest.approx((math.exp(0.2 - 3.182 * se) - 1) * 100)
    assert e.hi_pct == pytest.approx((math.exp(0.2 + 3.182 * se) - 1) * 100)


def test_a_server_faster_than_its_twin_no_longer_widens_the_interval():
    """Ratios +2% +-5% by turns (one server 10% faster than the other) and a little noise:
    the plain interval carries the turns, the stratified one only the noise, and both are
    centred on +2%."""
    noise = [0.002, -0.001, -0.002, 0.001, 0.0, 0.001, -0.001, 0.0]
    d = [0.02 + (0.05 if i % 2 == 0 else -0.05) + x for i, x in enumerate(noise)]
    b = [math.exp(x) for x in d]
    plain = stats.paired_effect([1.0] * 8, b, 1.0)
    strat = stats.paired_effect([1.0] * 8, b, 1.0, [i % 2 for i in range(8)])
    assert plain.strata == 1 and strat.strata == 2
    assert plain.half_width_pct > 4 and strat.half_width_pct < 0.3
    assert strat.pct == pytest.approx(2.02, abs=0.05) and strat.verdict == "improved"
    assert plain.verdict == "inconclusive"


@pytest.mark.parametrize("keys", [
    [0, 1, 0],            # a placement with one pair: no spread of its own
    ["x", "x", "x"],      # one placement
    [None, None, None],   # the restart design: no servers side by side
])
def test_the_plain_paired_t_where_strata_cannot_be_used(keys):
    b = [1.02, 1.05, 0.99]
    e = stats.paired_effect([1.0] * 3, b, 1.0, keys)
    assert e == stats.paired_effect([1.0] * 3, b, 1.0) and e.strata == 1


def _run(epoch, variant, tps, server, phase=None):
    return measure.Sample(epoch, variant, tps, None, 1, 2, 3, None, None, None, None, "4k", {},
                          epoch=epoch, server=server, phase=phase)


def test_placements_are_read_off_the_samples_of_a_side_by_side_run():
    """current and recommended trade servers every epoch, server 0 running 6% faster, under
    THP phases never, always, always, never, ...: the plan's comparison and THP's (current's
    server, cycle by cycle) are stratified by where each side ran, and the report says so."""
    samples = []
    phases = ["thp-never", "thp-always"]
    from hpadvise.benchmarks.variants import phase_at
    for ep in range(8):
        ph = phase_at(ep, phases)
        thp = 1.01 if ph == "thp-always" else 1.0
        on = {"current": ep % 2, "recommended": 1 - ep % 2}
        for v, gain in (("current", 1.0), ("recommended", 1.03)):
            fast = 1.06 if on[v] == 0 else 1.0
            samples.append(_run(ep, v, 1000 * gain * fast * thp * (1 + 0.001 * (ep % 3)),
                                on[v], ph))
    pairs = [("current", "recommended"), ("thp-never", "thp-always")]
    eff = stats.comparisons(samples, pairs, phases, 1.0)
    plan, thp = eff[pairs[0]], eff[pairs[1]]
    assert plan.strata == 2 and plan.pct == pytest.approx(3.0, abs=0.2)
    assert plan.half_width_pct < 0.5
    assert thp.strata == 2 and thp.n == 4 and thp.pct == pytest.approx(1.0, abs=0.3)
    words = wording.answer({"meta": {"workload": "tpcb", "shared_buffers": "128MB"},
                            "effects": [{"a": "current", "b": "recommended", "n": plan.n,
                                         "pct": plan.pct, "lo_pct": plan.lo_pct,
                                         "hi_pct": plan.hi_pct, "verdict": plan.verdict,
                                         "strata": plan.strata}]})
    assert "stratified by server placement (2 placements" in " ".join(words)


def test_lines_known_answer():
    """Placement p at epochs 0, 2, .. 10: 0.2 + 0.01 (t - 5) + r; placement q at 1, 3, .. 11:
    0.3 - 0.02 (t - 6) + r, r = (+1, -1, 0, 0, -1, +1) x 0.01 (orthogonal to both lines).
    Lines at the mean epoch 5.5: 0.205 and 0.31, the effect their mean 0.2575; residual SS
    2 x 0.0004 on 12 - 4 df; se = sqrt(0.0008 / 8 x 2 (1/6 + 0.5^2 / 70)) / 2, t(0.975, 8) =
    2.306."""
    r = [0.01, -0.01, 0.0, 0.0, -0.01, 0.01]
    p = {2 * i: 0.2 + 0.01 * (2 * i - 5) + r[i] for i in range(6)}
    q = {2 * i + 1: 0.3 - 0.02 * (2 * i + 1 - 6) + r[i] for i in range(6)}
    d = {**p, **q}
    epochs = sorted(d)
    e = stats.paired_effect([1.0] * 12, [math.exp(d[t]) for t in epochs], 1.0,
                            ["p" if t % 2 == 0 else "q" for t in epochs], epochs)
    se = math.sqrt(0.0008 / 8 * 2 * (1 / 6 + 0.25 / 70)) / 2
    assert e.strata == 2 and e.drift and e.n == 12 and e.df == 8
    assert e.pct == pytest.approx((math.exp(0.2575) - 1) * 100)
    assert e.lo_pct == pytest.approx((math.exp(0.2575 - 2.306 * se) - 1) * 100)
    assert e.hi_pct == pytest.approx((math.exp(0.2575 + 2.306 * se) - 1) * 100)


def _drifting(n, noise=(0.002, -0.001, -0.002, 0.001, 0.0, 0.001, -0.001, 0.0)):
    """+2% with a copy growing slower by 0.5% an epoch, the servers turning every epoch."""
    return [0.02 + (-1) ** i * 0.005 * i + noise[i % len(noise)] for i in range(n)]


def test_a_server_growing_slower_no_longer_widens_the_interval():
    """17 epochs: the level-per-placement interval carries the drift as noise (about 1.4%
    wide), the lines only the noise; both centred on +2%."""
    d = _drifting(17)
    b = [math.exp(x) for x in d]
    keys = [i % 2 for i in range(17)]
    lines = stats.paired_effect([1.0] * 17, b, 1.0, keys)
    assert lines.drift and lines.half_width_pct < 0.3
    assert lines.pct == pytest.approx(2.02, abs=0.1) and lines.verdict == "improved"
    with unittest.mock.patch.object(stats, "DRIFT_MIN_EPOCHS", 99):
        levels = stats.paired_effect([1.0] * 17, b, 1.0, keys)
    assert not levels.drift and levels.strata == 2 and levels.half_width_pct > 1.0
    assert levels.pct == pytest.approx(lines.pct, abs=0.3)


@pytest.mark.parametrize("n, drift", [(10, False), (11, False), (12, True), (17, True)])
def test_lines_only_where_each_placement_holds_enough_epochs(n, drift):
    """Two placements by turns: lines from DRIFT_MIN_EPOCHS (6) epochs in each on."""
    b = [math.exp(x) for x in _drifting(n)]
    e = stats.paired_effect([1.0] * n, b, 1.0, [i % 2 for i in range(n)])
    assert e.drift is drift and e.strata == 2


def test_comparisons_fit_lines_over_the_epochs_and_the_report_says_so():
    """14 epochs side by side, server 1 slowing by 0.4% an epoch: the plan's comparison is
    fitted with a line per placement over the epochs, and the report names the method."""
    samples = []
    for ep in range(14):
        on = {"current": ep % 2, "recommended": 1 - ep % 2}
        for v, gain in (("current", 1.0), ("recommended", 1.03)):
            slow = 1 - 0.004 * ep if on[v] == 1 else 1.0
            samples.append(_run(ep, v, 1000 * gain * slow * (1 + 0.001 * (ep % 3)), on[v]))
    plan = stats.comparisons(samples, [("current", "recommended")], [], 1.0)[
        ("current", "recommended")]
    assert plan.drift and plan.strata == 2 and plan.half_width_pct < 0.3
    assert plan.pct == pytest.approx(3.0, abs=0.2)
    words = wording.answer({"meta": {"workload": "tpcb", "shared_buffers": "128MB"},
                            "effects": [{"a": "current", "b": "recommended", "n": plan.n,
                                         "pct": plan.pct, "lo_pct": plan.lo_pct,
                                         "hi_pct": plan.hi_pct, "verdict": plan.verdict,
                                         "strata": plan.strata, "drift": plan.drift}]})
    assert "each placement's level a straight line over the run" in " ".join(words)


@pytest.mark.parametrize("name", ["aa-10m-53", "aa-10m-38"])
def test_an_a_a_says_how_its_interval_was_made(name):
    """A recorded A/A run (lab/results) read back as the report reads it: its line names the
    strata and, where the placements' levels were lines over the run, says so, as the plan's
    comparison does; a plain paired t says nothing more."""
    result = json.loads((Path(__file__).resolve().parents[2] / "lab" / "results"
                         / f"{name}.json").read_text())
    e = result["effects"][0]
    line = next(a for a in wording.advice(result) if a.startswith("A/A ("))
    assert (f"stratified by server placement ({e['strata']} placements"
            in line) == ((e.get("strata") or 1) >= 2)
    assert ("straight line over the run" in line) == bool(e.get("drift"))
    plain = dict(e, strata=1, drift=False)
    assert "stratified" not in wording.advice(dict(result, effects=[plain]))[0]
