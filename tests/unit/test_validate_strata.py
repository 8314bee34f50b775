"""validate's interval stratified by server placement (stats.paired_effect): a known answer
worked by hand, the fall-back to the plain paired t, and the placements read off the samples
of a side-by-side run, THP phases included."""

import math

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
    assert e.strata == 2 and e.n == 5
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
