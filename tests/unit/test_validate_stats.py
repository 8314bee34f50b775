"""validate's statistics and parsers: synthetic samples with known answers, captured pgbench 15
output."""

import math
import os
from pathlib import Path

import pytest

from hpadvise.benchmarks import cpus, measure, pgbench, runner, stats, variants
from hpadvise.benchmarks.options import Options
from hpadvise.kit.errors import InputError
from hpadvise.plugins.postgres.validate import bench as pgbench_target

PGB = Path(__file__).resolve().parent.parent / "fixtures" / "pgbench"


def test_t_quantiles():
    assert stats.t975(1) == 12.706 and stats.t975(30) == 2.042
    assert 2.021 < stats.t975(35) < 2.042
    assert stats.t975(1000) == pytest.approx(1.9623, abs=0.001)  # tables: 1.9623
    with pytest.raises(ValueError):
        stats.t975(0)


def test_paired_effect_known_answer():
    # ln ratios 0.1, 0.2, 0.3: mean 0.2, sd 0.1, se 0.1/sqrt(3), t(2)=4.303
    a = [100.0, 100.0, 100.0]
    b = [100 * math.exp(x) for x in (0.1, 0.2, 0.3)]
    e = stats.paired_effect(a, b)
    h = 4.303 * 0.1 / math.sqrt(3)
    assert e.n == 3
    assert e.pct == pytest.approx((math.exp(0.2) - 1) * 100)
    assert e.lo_pct == pytest.approx((math.exp(0.2 - h) - 1) * 100)
    assert e.hi_pct == pytest.approx((math.exp(0.2 + h) - 1) * 100)
    assert e.verdict == "inconclusive"  # the CI still includes 0


def test_pairing_cancels_drift():
    # The machine slows down 30% over the blocks; B is always exactly 5% faster.
    a = [1000 * (1 - 0.1 * k) for k in range(4)]
    b = [x * 1.05 for x in a]
    e = stats.paired_effect(a, b)
    assert e.pct == pytest.approx(5.0) and e.half_width_pct == pytest.approx(0, abs=1e-9)
    assert e.verdict == "improved"


@pytest.mark.parametrize("pct,lo,hi,word", [
    (20, 15, 25, "improved"),
    (-20, -25, -15, "regressed"),
    (0.2, -0.5, 0.9, "no meaningful change"),
    (0.5, 0.1, 0.9, "no meaningful change"),  # excludes 0 but inside the ±1% band
    (3, -1, 7, "inconclusive"),
    (0.8, 0.2, 1.4, "inconclusive"),  # excludes 0, estimate inside the band, CI leaves it
])
def test_verdict_words(pct, lo, hi, word):
    assert stats.verdict(pct, lo, hi, band=1.0) == word


def test_stopping_rule():
    tight = stats.Effect(4, 10, 9.5, 10.5, "improved")
    wide = stats.Effect(4, 10, 2, 18, "improved")
    early = stats.Effect(2, 10, 9.9, 10.1, "improved")
    assert stats.should_stop([tight], 1.0)
    assert not stats.should_stop([tight, wide], 1.0)
    assert not stats.should_stop([early], 1.0)  # too few blocks to trust the CI
    assert not stats.should_stop([], 1.0)
    assert not stats.should_stop([tight], None)  # no target: the whole budget is used


def test_one_block_is_inconclusive():
    e = stats.paired_effect([100.0], [150.0])
    assert e.n == 1 and e.verdict == "inconclusive" and math.isinf(e.half_width_pct)


def test_percentile_nearest_rank():
    v = list(range(1, 101))
    assert stats.percentile(v, 50) == 50 and stats.percentile(v, 99) == 99
    assert stats.percentile([7], 95) == 7 and math.isnan(stats.percentile([], 50))


def test_parse_pgbench15_summary_and_progress():
    s = pgbench.parse_summary((PGB / "select.stdout").read_text())
    assert s.tps == pytest.approx(35997.329201)
    assert s.transactions == 107771 and s.failed == 0
    assert s.latency_avg_ms == 0.100 and s.latency_stddev_ms == 0.096
    p = pgbench.parse_progress((PGB / "select.stderr").read_text())
    assert p == [(1.0, 37872.4, 0.094), (2.0, 39501.0, 0.092), (3.0, 30304.1, 0.119)]
    assert pgbench.parse_summary((PGB / "tpcb.stdout").read_text()).tps == \
        pytest.approx(2786.297172)


def test_parse_old_two_tps_lines():
    out = ("tps = 100.5 (including connections establishing)\n"
           "tps = 101.25 (excluding connections establishing)\n")
    assert pgbench.parse_summary(out).tps == 101.25
    with pytest.raises(ValueError):
        pgbench.parse_summary("no summary here")


def test_parse_transaction_logs():
    logs = sorted(str(p) for p in PGB.glob("select.log.*"))
    lat = pgbench.parse_log_latencies_us(logs)
    assert len(lat) == 600 and lat[:2] == [1790, 1325]  # third column: latency in us
    assert all(x > 0 for x in lat)


@pytest.mark.parametrize("text,secs", [("10m", 600), ("90s", 90), ("1h", 3600), ("45", 45)])
def test_durations(text, secs):
    assert variants.parse_duration(text) == secs


@pytest.mark.parametrize("text", ["10x", "", "m", "-5m", "1.5h"])
def test_bad_durations(text):
    with pytest.raises(InputError, match="not a duration"):
        variants.parse_duration(text)


def test_pairs():
    assert variants.pairs_for(list(variants.DEFAULT_VARIANTS)) == [
        ("current", "recommended"), ("thp-never", "thp-always")]
    assert variants.pairs_for(["hugepages-off", "thp-always"]) == [("hugepages-off", "thp-always")]


def test_a_variant_named_twice_is_an_a_a_run():
    """A repeated variant gets its own label (a second server or run of the same variant), is
    compared with the first of its kind, and runs what its kind runs."""
    assert variants.labels_for(["current", "current"]) == ["current", "current#2"]
    assert variants.labels_for(["recommended", "current", "recommended", "recommended"]) == [
        "recommended", "current", "recommended#2", "recommended#3"]
    assert variants.pairs_for(["current", "current#2"]) == [("current", "current#2")]
    assert variants.pairs_for(["current", "recommended", "current#2"]) == [
        ("current", "recommended"), ("current", "current#2")]
    assert variants.kind("recommended#2") == "recommended" and variants.kind("thp-never") == \
        "thp-never"
    v = runner.Validation(Options(variants=["hugepages-off", "hugepages-off"],
                                         duration_s=60, db="postgres"))

    class Server:
        def hugepages_off(self):
            return [("huge_pages", "off")]
    assert v.sw.steps("hugepages-off#2", Server()) == [("huge_pages", "off")]


def test_a_a_advice_reads_the_noise_and_flags_a_false_verdict():
    from hpadvise.benchmarks import wording
    e = {"a": "current", "b": "current#2", "pct": 0.4, "lo_pct": -1.1, "hi_pct": 1.9,
         "half_width_pct": 1.5, "verdict": "no meaningful change"}
    [text] = wording.advice({"meta": {}, "effects": [e]})
    assert text.startswith("A/A (current#2 against current") and "about ±1.5%" in text
    [text] = wording.advice({"meta": {}, "effects": [dict(e, lo_pct=0.2, pct=2.5,
                                                         verdict="improved")]})
    assert "should not differ" in text and "Repeat it" in text


def test_steady_state_leaves_out_the_warm_up():
    # 1 s intervals: 100 tps during a 2 s warm-up, then 300 and 500 (latency 2 and 4 ms)
    prog = [(1.0, 100.0, 9.0), (2.0, 100.0, 9.0), (3.0, 300.0, 2.0), (4.0, 500.0, 4.0)]
    tps, lat = pgbench.steady(prog, 2)
    assert tps == 400.0
    assert lat == pytest.approx((300 * 2 + 500 * 4) / 800)  # weighted by transactions
    assert pgbench.steady(prog, 0)[0] == 250.0
    assert pgbench.steady(prog, 4) is None  # nothing measured after the warm-up


def test_transaction_log_warm_up_cut_by_completion_time():
    logs = sorted(str(p) for p in PGB.glob("select.log.*"))
    times = sorted(int(ln.split()[4]) + int(ln.split()[5]) / 1e6
                   for p in logs for ln in open(p))
    cut = (times[-1] - times[0]) / 2
    kept = pgbench.parse_log_latencies_us(logs, cut)
    assert len(kept) == sum(1 for t in times if t >= times[0] + cut)
    assert 0 < len(kept) < 600


def test_prewarm_queries_cover_every_block_once_in_equal_shares():
    import re
    rels = [(16384, 1000), (16390, 7), (16391, 0), (16392, 501)]
    qs = pgbench_target.prewarm_queries(rels, 2)
    assert len(qs) == 2
    seen: dict[int, list[int]] = {}
    share = []
    for q in qs:
        n = 0
        for oid, a, b in re.findall(r"pg_prewarm\((\d+)::regclass, 'buffer', 'main', (\d+), "
                                    r"(\d+)\)", q):
            seen.setdefault(int(oid), []).extend(range(int(a), int(b) + 1))
            n += int(b) - int(a) + 1
        share.append(n)
    assert {k: sorted(v) for k, v in seen.items()} == \
        {oid: list(range(n)) for oid, n in rels if n}
    assert abs(share[0] - share[1]) <= 1
    assert pgbench_target.prewarm_queries([(1, 3)], 8) == [
        "SELECT pg_prewarm(1::regclass, 'buffer', 'main', 0, 0)",
        "SELECT pg_prewarm(1::regclass, 'buffer', 'main', 1, 1)",
        "SELECT pg_prewarm(1::regclass, 'buffer', 'main', 2, 2)"]


def test_steal_share_from_two_proc_stat_readings(tmp_path):
    # Two `cpu` lines captured 5 s apart on the project's VM, the second with steal added to
    # show the arithmetic: 100 ticks of steal out of 1,000.
    from hpadvise.facts.platform import read_cpu_times
    from hpadvise.facts.sysroot import SysRoot
    (tmp_path / "proc").mkdir()
    stat = tmp_path / "proc" / "stat"
    stat.write_text("cpu  38244 0 43081 101903 1025 0 289 101 0 0\n"
                    "cpu0 17490 0 19773 54725 206 0 27 50 0 0\n")
    sr = SysRoot(tmp_path)
    a = read_cpu_times(sr)
    assert a == {"user": 38244, "nice": 0, "system": 43081, "idle": 101903, "iowait": 1025,
                 "irq": 0, "softirq": 289, "steal": 101}
    stat.write_text("cpu  38410 0 43477 102269 1092 0 290 201 0 0\n")
    b = read_cpu_times(sr)
    assert measure.steal_pct(a, b) == round(100 * 100 / (166 + 396 + 366 + 67 + 1 + 100), 1)
    assert measure.steal_pct(None, b) is None
    assert measure.steal_pct(b, b) is None  # no time passed: no share
    stat.write_text("intr 1 2 3\n")
    assert read_cpu_times(sr) is None


def _sample(block, variant, tps, epoch):
    return measure.Sample(block, variant, tps, None, 1, 2, 3, None, None, None, None, "4k", {},
                         epoch=epoch)


def test_epochs_are_the_unit_runs_inside_one_are_averaged_geometrically():
    """Two rounds in each of three epochs: the effect pairs epoch geometric means, so n is
    the number of epochs (server starts), not of runs."""
    v = runner.Validation(Options(variants=["current", "recommended"], duration_s=60,
                                         db="postgres"))
    tps = {0: [(100, 110), (100, 121)], 1: [(90, 99), (110, 121)], 2: [(100, 105), (100, 115)]}
    for ep, rounds in tps.items():
        for r, (a, b) in enumerate(rounds):
            v.samples += [_sample(ep * 2 + r, "current", a, ep),
                          _sample(ep * 2 + r, "recommended", b, ep)]
    [e] = v.effects().values()
    assert e.n == 3
    per_epoch = [math.log(stats.geomean([b for _, b in rs]) / stats.geomean([a for a, _ in rs]))
                 for rs in tps.values()]
    assert e.pct == pytest.approx((math.exp(sum(per_epoch) / 3) - 1) * 100)
    from hpadvise.benchmarks import wording
    result = {"samples": [vars(s) for s in v.samples],
              "effects": [{"a": "current", "b": "recommended"}]}
    [(a, b, ratios)] = wording.block_ratios(result)
    assert [u for u, _ in ratios] == [0, 1, 2]
    assert [r for _, r in ratios] == pytest.approx([math.exp(x) for x in per_epoch])


def test_cpu_groups_are_disjoint_and_equal():
    groups = cpus.cpu_groups(2)
    assert len(groups) == 2 and len(groups[0]) == len(groups[1]) >= 1
    assert not set(groups[0]) & set(groups[1])
    assert set().union(*groups) <= set(os.sched_getaffinity(0))


def test_servers_and_start_order_turn_between_epochs():
    """Side by side, over every n epochs each variant runs once on each server (the original
    and its copies), and over n*n epochs starts once in each place among servers alike; the
    servers on huge pages always start first."""
    v = runner.Validation(Options(variants=["current", "current#2"], duration_s=60,
                                         db="postgres"))
    v.made = [("original", None), ("copy", None)]
    on = []
    for ep in range(4):
        v.assign_servers(ep)
        on.append((v.servers["current"][0], v.servers["current#2"][0]))
    assert on == [("original", "copy"), ("copy", "original")] * 2
    firsts = [variants.start_order(["current", "current#2"], ep)[0] for ep in range(4)]
    assert firsts == ["current", "current", "current#2", "current#2"]
    # copy and start order are not confounded: over 4 epochs current#2 is the copy and
    # starts second, the original and starts second, the copy and starts first, ...
    assert {(on[ep][1], firsts[ep]) for ep in range(4)} == {
        ("copy", "current"), ("original", "current"),
        ("copy", "current#2"), ("original", "current#2")}
    three = ["current", "recommended", "hugepages-1g"]
    for ep in range(9):
        order = variants.start_order(three, ep)
        assert order[-1] == "current" and set(order) == set(three)
    assert {variants.start_order(three, ep)[0] for ep in range(9)} == {"recommended",
                                                                      "hugepages-1g"}


@pytest.mark.parametrize("warm_s,run_s,swap_s,n", [(11, 30, 3, 2), (4, 30, 3, 2), (20, 30, 5, 3),
                                                    (0, 12, 2, 2), (7, 30, 2.5, 2)])
def test_cpu_trades_within_a_run_share_the_measured_part_evenly(warm_s, run_s, swap_s, n):
    """The servers trade CPUs on a grid through the end of the warm-up: the measured part is
    whole pieces, and with a multiple of n of them every server spends the same time on every
    CPU group; no trade before the first grid point."""
    assert cpus.turn(0, warm_s, swap_s) == 0
    step = 0.01
    time_on = [[0.0] * n for _ in range(n)]  # [server][group]
    for k in range(int(run_s / step)):
        turn = cpus.turn(warm_s + (k + 0.5) * step, warm_s, swap_s)
        for i in range(n):
            time_on[i][(i + turn) % n] += step
    for row in time_on:
        assert row == pytest.approx([run_s / n] * n, abs=1e-6)
    # whole pieces: the turn changes exactly at the end of the warm-up (unless none is left)
    if warm_s:
        assert cpus.turn(warm_s + 1e-9, warm_s, swap_s) == \
            cpus.turn(warm_s - 1e-9, warm_s, swap_s) + 1


def test_clients_are_ended_even_when_they_ignore_sigterm():
    """SIGTERM to each client's process group, SIGKILL where it stays: a client stopped with
    SIGSTOP and one that ignores SIGTERM both end, within the wait."""
    import signal
    import subprocess
    import time
    stopped = subprocess.Popen(["sleep", "60"], start_new_session=True)
    deaf = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60; true"],
                            start_new_session=True)
    os.kill(stopped.pid, signal.SIGSTOP)
    time.sleep(0.2)  # the shell has set its trap
    t0 = time.time()
    measure.kill_all([stopped, deaf], wait_s=0.5)
    assert stopped.returncode in (-signal.SIGTERM, -signal.SIGKILL)
    assert deaf.returncode == -signal.SIGKILL
    assert time.time() - t0 < 5


def test_geomean():
    assert stats.geomean([1, 100]) == pytest.approx(10)
    assert stats.geomean([5]) == pytest.approx(5)


def test_the_advice_quotes_checks_own_thp_plan(hosts):
    """validate's THP advice states what `check` recommends on the same host (its plan, read
    from a captured host whose THP knobs are all 'always'), so the two never disagree; a
    profile that wants shmem THP is quoted as agreeing with a shmem THP gain."""
    from hpadvise.benchmarks import wording
    from hpadvise.facts.sysroot import SysRoot
    from hpadvise.benchmarks.options import see
    o = Options(variants=["current", "recommended"], duration_s=600, db="postgres")
    plan_thp = dict(see(o, None, SysRoot(hosts / "thp-always")).thp_plan)
    assert plan_thp == {"enabled": "madvise", "defrag": "madvise", "shmem_enabled": "never"}

    def said(effects, plan):
        return " ".join(wording.advice({"meta": {"plan_thp": plan, "profile": "oltp"},
                                       "effects": effects}))
    shm = {"a": "current", "b": "thp-shmem", "pct": 12.0, "verdict": "improved"}
    text = said([shm], plan_thp)
    assert "whole host" in text and "check recommends shmem_enabled=never" in text
    text = said([shm], dict(plan_thp, shmem_enabled="always"))
    assert "check recommends shmem_enabled=always (profile oltp), as measured" in text
    always = {"a": "thp-never", "b": "thp-always", "pct": 4.0, "verdict": "improved"}
    assert "check recommends enabled=madvise" in said([always], plan_thp)
    never = dict(always, pct=-4.0, verdict="regressed")
    assert "enabled=never beat always by 4.0%" in said([never], plan_thp)
    assert said([dict(always, verdict="inconclusive")], plan_thp) == ""


def test_sigterm_is_never_swallowed_by_a_best_effort_block():
    """validate raises Interrupted where SIGTERM lands; blocks that keep a rollback or a
    diagnosis going catch Exception (journal.rollback, PgSetting.set), and would swallow it.
    Like KeyboardInterrupt, it must pass through them."""
    from hpadvise.benchmarks.runner import Interrupted

    def best_effort():
        try:
            raise Interrupted()
        except Exception:  # noqa: BLE001 (what such blocks do)
            return "swallowed"

    with pytest.raises(Interrupted):
        best_effort()


def test_measured_seconds_count_runs_side_by_side_once():
    """Runs measure from their start plus the warm-up for run_s seconds; two runs measuring
    at the same moment (side by side) count once, gaps between runs not at all."""
    def run(t):
        return measure.Sample(0, "current", 1.0, 1.0, 1.0, 1.0, 1.0, None, None, None, None,
                              "4k", {}, started=t)
    pair = [run(100.0), run(100.4)]  # side by side: one starts 0.4 s after the other
    later = [run(200.0)]
    assert stats.measured_seconds(pair + later, 3, 30) == pytest.approx(30.4 + 30)
    assert stats.measured_seconds([run(0.0), run(10.0)], 1, 20) == pytest.approx(30)
    assert stats.measured_seconds([], 3, 30) == 0


def test_the_report_says_what_share_of_the_run_measured():
    from hpadvise.benchmarks.wording import measured_line
    line = measured_line({"elapsed_s": 545.0, "setup_s": 10.0, "measured_s": 480.0})
    assert line.startswith("Measured 480 s of the 555 s this run took (86%)")
    assert "of the 545 s" in measured_line({"elapsed_s": 545.0, "measured_s": 1.0})
    assert measured_line({"elapsed_s": 0, "measured_s": 0}) == ""
    assert measured_line({"elapsed_s": 30.0}) == ""

