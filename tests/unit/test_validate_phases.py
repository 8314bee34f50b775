"""validate's THP phases: which variants become phases, the order of the phases, every server
on every CPU group and in every phase alike, the comparisons over epochs and cycles (synthetic
samples with known answers), the choice of design, and the report's first words."""

import math
from dataclasses import replace
import os

import pytest

from hpadvise.benchmarks import cpus, stats, variants, wording
from hpadvise.benchmarks.measure import Sample
from hpadvise.benchmarks.design import explained
from hpadvise.benchmarks.options import Options, choose_design
from hpadvise.kit.errors import InputError
from hpadvise.facts.meminfo import read_meminfo
from hpadvise.facts.sysroot import SysRoot

DEFAULT = list(variants.DEFAULT_VARIANTS)


@pytest.mark.parametrize("names,phases", [
    (DEFAULT, ["thp-never", "thp-always"]),
    # thp-shmem is compared with current itself: the host as it is becomes a phase
    (["current", "recommended", "thp-shmem"], ["current", "thp-shmem"]),
    (["current", "recommended", "thp-never", "thp-always", "thp-shmem"],
     ["current", "thp-never", "thp-always", "thp-shmem"]),
    (["current", "recommended"], []),                   # nothing host-wide
    (["thp-never", "thp-always"], []),                  # nothing to run side by side
    (["current", "thp-shmem"], []),                     # no per-server comparison
    (["recommended", "hugepages-off", "thp-never", "thp-always"], []),  # no current server
])
def test_which_variants_become_phases(names, phases):
    assert variants.phases_for(variants.labels_for(names)) == phases


@pytest.mark.parametrize("phases", [["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d"]])
def test_phase_order_is_a_latin_square(phases):
    """Over k cycles each phase holds every position of a cycle once, and every cycle has
    each phase once; for two phases the order is ABBA."""
    k = len(phases)
    order = [variants.phase_at(e, phases) for e in range(k * k)]
    cycles = [order[c * k:(c + 1) * k] for c in range(k)]
    assert all(sorted(c) == sorted(phases) for c in cycles)
    for pos in range(k):
        assert sorted(c[pos] for c in cycles) == sorted(phases)
    if k == 2:
        assert order == ["a", "b", "b", "a"]
    assert variants.phase_at(3, []) is None


def test_every_server_alike_on_every_cpu_group_and_in_every_phase():
    """The simultaneous schedule over k cycles of the default run: one round per epoch (the
    servers trade CPUs within it), each per-server variant starting on every CPU group
    equally often in every THP phase, running in every phase in the same number of epochs,
    and every phase holding every position of a cycle equally."""
    from hpadvise.benchmarks.budget import default_rounds
    names = variants.labels_for(DEFAULT)
    phases = variants.phases_for(names)
    servers = [v for v in names if not variants.host_wide(v)]
    n, k = len(servers), len(phases)
    rounds = default_rounds("simultaneous", n, trades=True)
    assert rounds == 1 and default_rounds("simultaneous", n, trades=False) == n
    on_group: dict[tuple[str, str, int], int] = {}
    in_phase: dict[tuple[str, str], int] = {}
    position: dict[tuple[str, int], int] = {}
    for epoch in range(k * k):
        ph = variants.phase_at(epoch, phases)
        for i, v in enumerate(servers):
            in_phase[(v, ph)] = in_phase.get((v, ph), 0) + 1
            position[(ph, epoch % k)] = position.get((ph, epoch % k), 0) + 1
            for r in range(rounds):
                g = variants.group_of(i, epoch * rounds + r, n)
                on_group[(v, ph, g)] = on_group.get((v, ph, g), 0) + 1
    assert set(on_group.values()) == {1} and len(on_group) == n * k * n
    assert set(in_phase.values()) == {k} and len(in_phase) == n * k
    assert len(set(position.values())) == 1 and len(position) == k * k
    assert len(cpus.cpu_groups(n)) == n


def synthetic(epochs: int, phases: list[str], plan=1.20, thp=1.10) -> list[Sample]:
    """Side-by-side samples with known answers: recommended = plan x current in every epoch,
    THP always = thp x never on every server, and a drift from cycle to cycle that pairing
    must cancel (drift between the epochs of one cycle is what widens THP's interval, and
    what the turning order cancels on average); two rounds per epoch."""
    out = []
    for epoch in range(epochs):
        ph = variants.phase_at(epoch, phases)
        drift = 1000 * (1 + 0.3 * math.sin(epoch // len(phases)))
        level = drift * (thp if ph == "thp-always" else 1.0)
        for r in range(2):
            for v, f in (("current", 1.0), ("recommended", plan)):
                out.append(Sample(epoch * 2 + r, v, level * f, None, 1, 2, 3, None, None,
                                  None, None, "4k", {}, epoch=epoch, phase=ph))
    return out


def test_comparisons_over_epochs_and_cycles():
    """The plan's comparison uses every epoch whatever its phase; THP's pairs the phases of
    one cycle on current's server, so an unfinished cycle counts for the plan only."""
    phases = ["thp-never", "thp-always"]
    samples = synthetic(9, phases)
    pairs = variants.pairs_for(variants.labels_for(DEFAULT))
    eff = stats.comparisons(samples, pairs, phases, 1.0)
    plan, thp = eff[("current", "recommended")], eff[("thp-never", "thp-always")]
    assert plan.n == 9 and plan.pct == pytest.approx(20.0)
    assert thp.n == 4 and thp.pct == pytest.approx(10.0)
    assert plan.verdict == thp.verdict == "improved"
    per = stats.by_phase(samples, pairs, phases, 1.0)[("current", "recommended")]
    assert {ph: x["n"] for ph, x in per.items()} == {"thp-never": 5, "thp-always": 4}
    assert all(x["pct"] == pytest.approx(20.0) for x in per.values())
    # the THP variants' runs are current's in their phase, a unit per cycle
    thp_runs = stats.phase_samples(samples, phases)
    assert {s.variant for s in thp_runs} == set(phases)
    assert {s.epoch for s in thp_runs} == set(range(5))
    assert all(s.tps == pytest.approx(1000 * (1 + 0.3 * math.sin(s.epoch))
                                      * (1.1 if s.phase == "thp-always" else 1))
               for s in thp_runs)
    # without phases nothing is re-paired: the restart design's effects as before
    assert stats.comparisons(samples, [("current", "recommended")], [], 1.0) == \
        stats.effects(samples, [("current", "recommended")], 1.0)
    # the report shows the ratios each interval comes from: per cycle for THP
    result = {"meta": {"phases": phases},
              "samples": [vars(s) for s in samples],
              "effects": [{"a": a, "b": b} for a, b in pairs]}
    ratios = dict(((a, b), r) for a, b, r in wording.block_ratios(result))
    assert [r for _, r in ratios[("thp-never", "thp-always")]] == pytest.approx([1.1] * 4)
    assert [r for _, r in ratios[("current", "recommended")]] == pytest.approx([1.2] * 9)


class Twinnable:
    """A scratch server that can be copied (BenchTarget.twin_blocker: None)."""

    def twin_blocker(self):
        return None


@pytest.mark.parametrize("names,design", [
    (DEFAULT, "auto"), (DEFAULT, "resident"), (DEFAULT, "restart"),
    (["current", "recommended", "hugepages-off", "thp-never", "thp-always"], "auto"),
    (["thp-never", "thp-always"], "auto"),
])
def test_design_and_phases_chosen(hosts, names, design):
    sr = SysRoot(hosts / "thp-always")  # 24 GB available
    o = Options(variants=variants.labels_for(names), duration_s=600, db="postgres",
                design=design)
    got, why, phases = choose_design(o, Twinnable(), 1 << 30, read_meminfo(sr).available_kb)
    servers = [v for v in names if not variants.host_wide(v)]
    if design == "restart" or not variants.phases_for(names):
        assert got == "restart" and phases == []
        if design == "auto":
            assert "host-wide THP" in why
        return
    cpus_here = len(os.sched_getaffinity(0))
    if design == "auto" and len(servers) > cpus_here:
        assert got == "restart" and phases == [] and f"need {len(servers)} CPUs" in why
        return
    assert got == ("simultaneous" if design == "auto" else design)
    assert phases == ["thp-never", "thp-always"]
    assert "phases" not in why
    said = explained(why, phases, o.variants)
    assert said.startswith(why) and "thp-never, thp-always change host-wide" in said
    # with every THP variant skipped, nothing takes turns and the reason says none
    assert explained(why, [], o.variants) == why


def test_an_explicit_side_by_side_design_without_a_per_server_comparison_is_refused(hosts):
    o = Options(variants=["current", "thp-always"], duration_s=600, db="postgres",
                design="simultaneous")
    with pytest.raises(InputError, match="host-wide THP.*--design restart"):
        choose_design(o, Twinnable(), 1 << 30,
                      read_meminfo(SysRoot(hosts / "thp-always")).available_kb)


@pytest.mark.parametrize("verdict,lo,hi,words", [
    ("improved", 8.0, 12.0, "Apply the plan? Yes: it gained +10.0% TPS (95% CI +8.0 .. +12.0%)"),
    ("regressed", -12.0, -8.0, "Not for speed: it lost"),
    ("no meaningful change", -0.5, 0.7, "no difference beyond ±1% here"),
    ("inconclusive", -2.0, 22.0, "reaches beyond ±1% on both sides; give it a longer "
                                 "--duration, or --workload select to isolate the memory effect."),
    ("inconclusive", -0.3, 1.1, "reaches above +1%; give it a longer --duration, or"),
    ("inconclusive", -1.4, 0.2, "reaches below -1%; give it"),
])
def test_the_report_leads_with_the_plans_answer(verdict, lo, hi, words):
    pct = (lo + hi) / 2
    result = {"meta": {"band_pct": 1.0, "workload": "tpcb", "shared_buffers": "8GB",
                       "bench": "pgbench",
                       "buffers_setting": "shared_buffers", "design": "simultaneous",
                       "phases": ["thp-never", "thp-always"],
                       "side_by_side": ["current", "recommended"]},
              "effects": [{"a": "thp-never", "b": "thp-always", "pct": 1.0, "lo_pct": -5.0,
                           "hi_pct": 7.0, "verdict": "inconclusive", "n": 3,
                           "design": "THP phases", "unit": "cycle"},
                          {"a": "current", "b": "recommended", "pct": pct, "lo_pct": lo,
                           "hi_pct": hi, "verdict": verdict, "n": 7, "design": "simultaneous",
                           "unit": "epoch",
                           "by_phase": {"thp-never": {"n": 4, "pct": pct, "lo_pct": lo,
                                                      "hi_pct": hi},
                                        "thp-always": {"n": 3, "pct": pct, "lo_pct": lo,
                                                       "hi_pct": hi}}}]}
    head, how = wording.answer(result)
    assert words in head
    if verdict == "inconclusive":  # TPC-C has no workload of its own that isolates memory
        tpcc = {**result, "meta": {**result["meta"], "bench": "tpcc", "workload": "tpcc"}}
        assert wording.answer(tpcc)[0].endswith("; give it a longer --duration.")
    assert how.startswith("Measured simultaneous, 7 epochs side by side, tpcb workload")
    lines = wording.phase_lines(result)
    assert "thp-never / thp-always in turn" in lines[0]
    assert lines[1].startswith("current -> recommended by THP phase: thp-never")
    # a run without the plan's comparison says so, and what it compared instead
    assert wording.answer({"meta": {}, "effects": result["effects"][:1]}) == [
        "Apply the plan? This run did not measure it (recommended against current); it "
        "compared thp-always against thp-never, below. validate's default --variants measure "
        "the plan."]


@pytest.mark.parametrize("duration_s,warm_s,dropped", [
    (240, 11, True),    # 4 minutes at 8 GB: 5 s runs with THP phases; 45 s without
    (600, 11, False),   # 10 minutes: 65 s runs with the phases, which stay
    (600, 3, False),
])
def test_a_short_budget_drops_the_default_thp_phases(duration_s, warm_s, dropped):
    """Runs of 3 s said nothing on 16 CPUs (half-width 5%): where the default THP phases
    would cut the runs below the minimum, they are left out, said why, and the runs of the
    plan's comparison get long; variants named by the user are never dropped."""
    from hpadvise.benchmarks.budget import MIN_RUN_S, run_seconds
    from hpadvise.benchmarks.options import drop_phases
    o = Options(variants=list(DEFAULT), duration_s=duration_s, db="postgres", warm_s=warm_s,
                rounds=1, variants_given=False)  # the simultaneous default
    phases = variants.phases_for(o.variants)
    per = run_seconds(o, "simultaneous", 2, phases)
    assert (per < MIN_RUN_S) == dropped
    if not dropped:
        return
    given = o
    o, left, n = drop_phases(o, "simultaneous", 2, phases, rounds_given=False)
    assert left == [] and o.variants == ("current", "recommended") and n == 2
    assert given.variants == tuple(DEFAULT) and not given.dropped  # a new value
    assert set(o.dropped) == {"thp-never", "thp-always"}
    assert run_seconds(o, "simultaneous", n, left) >= MIN_RUN_S
    # the budget it names keeps the phases at MIN_RUN_S, and a minute less would not
    said = o.dropped["thp-never"]
    assert said.startswith(f"a budget of {duration_s} s holds too few epochs")
    minutes = int(said.split("--duration ")[1].split("m keeps")[0])
    assert run_seconds(replace(o, duration_s=minutes * 60), "simultaneous", 2,
                       phases) >= MIN_RUN_S
    assert run_seconds(replace(o, duration_s=(minutes - 1) * 60), "simultaneous", 2,
                       phases) < MIN_RUN_S


@pytest.mark.parametrize("state,buffers_gib,added", [
    ("lazy-126g", 24, True),     # 126 GiB, 24 GB of buffers: three servers side by side fit
    ("lazy-126g", 8, False),     # below production size
    ("lazy-126g", 48, False),    # three servers of 48 GB do not fit in 125 GiB
    ("no-pools", 16, False),     # 24 GiB: no room for a third server
])
def test_one_gib_pages_join_the_default_run_at_production_size(hosts, state, buffers_gib,
                                                               added):
    from hpadvise.benchmarks.options import gigantic_variant
    from hpadvise.facts.host import collect
    o = Options(variants=list(DEFAULT), duration_s=600, db="postgres", bench="pgbench",
                scale=1, variants_given=False)  # scale 1: the disk holds it anywhere
    target = type("T", (), {"wal_bytes": 0})()
    got = gigantic_variant(o, buffers_gib << 30, collect(SysRoot(hosts / state)), target)
    assert got.variants == o.variants + (("hugepages-1g",) if added else ())


def test_whose_clients_start_first_turns_against_server_and_start_order():
    """Simultaneous, one round an epoch: over every four epochs each of two variants starts
    its clients first twice, once on each server and once after each way of starting, so
    that none of the three orders is confounded with another or with the variant."""
    two = ["current", "current#2"]
    for base in (0, 4, 8):
        rows = [((ep % 2), variants.start_order(two, ep)[0], variants.client_order(two, ep)[0])
                for ep in range(base, base + 4)]
        # (current#2 on the original server?, who started first, whose clients went first)
        assert sorted(r[2] for r in rows) == ["current", "current", "current#2", "current#2"]
        for i, j in ((0, 1), (0, 2), (1, 2)):  # every two of the three orders
            assert len({(r[i], r[j]) for r in rows}) == 4, (i, j, rows)
    three = ["current", "recommended", "hugepages-1g"]
    assert sorted(variants.client_order(three, b)[0] for b in range(9)) == sorted(three * 3)
    assert all(sorted(variants.client_order(three, b)) == sorted(three) for b in range(9))
