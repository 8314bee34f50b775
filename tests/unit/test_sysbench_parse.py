"""Parsers of sysbench 1.0.20 output, on a captured run of hpadvise's TPC-C script."""

from pathlib import Path

import pytest

from hpadvise.benchmarks import sysbench as sb

OUT = (Path(__file__).resolve().parent.parent / "fixtures" / "sysbench" /
       "tpcc-mysql.stdout").read_text()


def test_summary_progress_and_histogram():
    n, tps, avg = sb.parse_summary(OUT)
    assert n > 0 and tps > 0 and avg > 0
    prog = sb.parse_progress(OUT)
    assert [p[0] for p in prog] == list(range(1, len(prog) + 1)) and len(prog) >= 3
    assert all(p[1] > 0 and p[2] > 0 for p in prog)
    hist = sb.parse_histogram(OUT)
    assert sum(c for _, c in hist) == n  # every event is in the histogram
    p50, p95, p99 = (sb.hist_percentile(hist, p) for p in (50, 95, 99))
    assert p50 <= p95 <= p99
    # sysbench's own 95th percentile is a bucket value of the same histogram
    own = float(OUT.split("95th percentile:")[1].split()[0])
    assert own == pytest.approx(p95, rel=0.05)


def test_live_tps_and_percentile_rule():
    line = next(ln for ln in OUT.splitlines() if ln.startswith("[ 2s ]"))
    assert sb.Sysbench.live_tps(line) == float(line.split("tps: ")[1].split()[0])
    assert sb.Sysbench.live_tps("Threads started!") is None
    hist = [(1.0, 50), (2.0, 45), (3.0, 4), (10.0, 1)]
    assert sb.hist_percentile(hist, 50) == 1.0 and sb.hist_percentile(hist, 95) == 2.0
    assert sb.hist_percentile(hist, 99) == 3.0 and sb.hist_percentile(hist, 100) == 10.0
    with pytest.raises(ValueError):
        sb.parse_summary("FATAL: something")


def test_failure_reason_is_the_scripts_line():
    out = "sysbench 1.0.20\nInitializing worker threads...\n\n tpcc: table warehouse1 does " \
          "not exist: run the prepare command first\n"
    assert sb._why(out).startswith("tpcc: table warehouse1 does not exist")
