"""probe's pieces that need no memory: the PMU check on crafted sysfs trees, the perf stat
CSV parser on output captured here, and the upper-bound arithmetic."""

from pathlib import Path

from hpadvise.facts import probe

PERF = Path(__file__).resolve().parents[1] / "fixtures" / "perf"


def test_pmu_absent_and_present(tmp_path):
    d = tmp_path / "sys/bus/event_source/devices"
    for name in ("breakpoint", "software", "tracepoint"):
        (d / name).mkdir(parents=True)
    assert probe.pmu_state(str(tmp_path)).startswith("no PMU in this VM")
    (d / "cpu").mkdir()
    assert probe.pmu_state(str(tmp_path)) == "present"
    assert "no perf events" in probe.pmu_state(str(tmp_path / "nothing"))


def test_perf_csv_captured_here():
    got = probe.parse_perf_csv((PERF / "stat-no-pmu.csv").read_text())
    assert got["dTLB-load-misses"] is None and got["dTLB-store-misses"] is None
    assert got["page-faults"] > 0 and got["task-clock"] > 0


def test_bound_is_share_times_relative_saving():
    r = probe.Result(1 << 30, 1000, [probe.Variant("4 KiB", 4, ns=80.0),
                                     probe.Variant("2 MiB THP", 2048, ns=30.0),
                                     probe.Variant("2 MiB hugetlb", 2048, ns=32.0),
                                     probe.Variant("1 GiB hugetlb", 1048576,
                                                   skipped="no 1 GiB pages")], "present")
    assert r.saving_ns() == 50.0
    assert abs(r.bound(0.1) - 0.1 * 50 / 80) < 1e-12
    r.variants[0].ns = None
    assert r.bound(0.1) is None


def test_validate_report_says_why_there_are_no_counters_or_shows_them():
    from hpadvise.benchmarks.wording import dtlb_line as _dtlb
    absent = {"meta": {"dtlb_counters": probe.pmu_state("/nonexistent-root")}, "samples": []}
    assert _dtlb(absent).startswith("dTLB counters: no perf events")
    counted = {"meta": {"dtlb_counters": "present", "variants": ["current", "recommended"]},
               "samples": [{"variant": "current", "dtlb": {"dTLB-load-misses": 900.0}},
                           {"variant": "current", "dtlb": {"dTLB-load-misses": 1100.0}},
                           {"variant": "recommended", "dtlb": {"dTLB-load-misses": None}}]}
    line = _dtlb(counted)
    assert "current: dTLB-load-misses 1,100" in line and "recommended" not in line


def test_perf_attaches_to_the_probe_and_reports_each_event():
    """The mechanism probe uses where a PMU exists, run here where perf only has software
    events: every dTLB event comes back, as not supported (None) on this VM."""
    import shutil

    import pytest
    if not shutil.which("perf"):
        pytest.skip("perf is not installed")
    got = probe._perf_detach(probe._perf_attach())
    assert got is not None and set(probe.dtlb_events()) <= set(got)
    assert set(probe.GENERIC_EVENTS) <= set(got)
    if probe.pmu_state() != "present":
        assert got["dTLB-load-misses"] is None
