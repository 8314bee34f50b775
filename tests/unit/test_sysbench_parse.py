"""Parsers of sysbench 1.0.20 output, on a captured run of hpadvise's TPC-C script."""

from pathlib import Path

import pytest

from hpadvise.benchmarks import sysbench as sb

OUT_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "sysbench"
OUT = (OUT_DIR / "tpcc-mysql.stdout").read_text()


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


def test_failure_reason_keeps_the_drivers_words():
    # captured: 16 threads connecting per event to a MariaDB 10.11 of max_connections 17
    out = ("FATAL: unable to connect to MySQL server on socket '/tmp/m/mysqld.sock', "
           "aborting...\nFATAL: error 1040: Too many connections\nFATAL: `thread_run' "
           "function failed: /tmp/pick.lua:2: connection creation failed\n"
           "FATAL: error 1040: Too many connections\nFATAL: `thread_run' function failed: "
           "/tmp/pick.lua:2: connection creation failed\n")
    why = sb._why(out)
    assert why.index("error 1040: Too many connections") < why.index("connection creation")
    assert why.count("Too many connections") == 1


def test_warm_up_left_out_through_a_report_checkpoint():
    # captured: --time=5 --report-checkpoints=2 (2 s warm-up, 3 s measured); the checkpoint
    # report at 2 s resets the counters, the final report covers the last 3 s only
    out = (OUT_DIR / "tpcc-mysql-warmup.stdout").read_text()
    assert "Checkpoint report" in out
    final = sb.final_report(out)
    n, tps, _ = sb.parse_summary(final)
    warm_n, _, _ = sb.parse_summary(out)  # the first summary is the checkpoint's
    assert warm_n != n
    assert tps == pytest.approx(n / 3, rel=0.05)  # transactions of the measured 3 s
    hist = sb.parse_histogram(final)
    assert sum(c for _, c in hist) == n  # the histogram was reset with the counters
    assert sb.Sysbench({"driver": "mysql", "socket": "/s", "user": "u", "db": "d"}).command(
        4, 3, 2)[-6:-4] == ["--time=5", "--report-checkpoints=2"]
