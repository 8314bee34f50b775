"""A user's --script under validate, on real scratch servers: every budget a bound (a script
whose one transaction outlasts a run's deadline is refused before anything is measured, within
the budget plus its stated setup), and errors in the user's script are input errors (one line,
exit 2), never internal ones (exit 70)."""

import json
import math
import time

import pytest

from support import host_state, run_cli, scratch_dirs

pytestmark = [pytest.mark.integration, pytest.mark.live]


def one_error(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("hpadvise: error")]
    assert len(lines) == 1 and "internal error" not in r.stderr, r.stderr[-2000:]
    return lines[0]


def test_a_script_past_its_budget_is_refused_before_measuring(knobs, tmp_path):
    """Table row 1: a 40 MB pgbench script (one \\set and 200,000 SELECTs; pgbench parses it
    for minutes) under --duration 1m used to print nothing for 5 minutes and leave a report
    of None and a JSON with NaN. Its trial is bounded by a run's deadline (warm-up, run and
    the grace, here --run-grace 3 where the default is 60): exit 2 in one line, nothing
    measured, nothing left."""
    big = tmp_path / "big.sql"
    with open(big, "w") as f:
        f.write("\\set aid random(1, 100000)\n")
        f.writelines("SELECT abalance FROM pgbench_accounts WHERE aid = :aid /* padding "
                     "padding padding padding padding padding padding padding padding */;\n"
                     for _ in range(200_000))
    tmp_path.chmod(0o755)
    big.chmod(0o644)
    dirs, host = scratch_dirs(), host_state()
    t0 = time.time()
    r = run_cli("validate", "--duration", "1m", "--buffers", "128MB", "--script", str(big),
                "--run-seconds", "3", "--warmup-seconds", "1", "--run-grace", "3",
                "--scale", "1", "--json",
                "--output", str(tmp_path / "r.json"), timeout=400)
    took = time.time() - t0
    line = one_error(r)
    assert r.returncode == 2 and "did not end within 7 s" in line, r.stderr[-2000:]
    assert took < 7 + 90, took  # the trial's bound plus the setup (scratch server, load)
    assert not (tmp_path / "r.json").exists()
    assert scratch_dirs() == dirs and host_state() == host


def test_script_errors_are_input_errors(knobs, tmp_path):
    """Table row 3: a Lua syntax error, and a SQL file given to sysbench (--bench tpcc),
    used to end in 'internal error: RuntimeError: sysbench ... prepare failed', exit 70."""
    bad = tmp_path / "bad.lua"
    bad.write_text("function event(\n  this is not lua\n")
    sql = tmp_path / "ok.sql"
    sql.write_text("SELECT 1;\n")
    tmp_path.chmod(0o755)
    dirs, host = scratch_dirs(), host_state()
    for script in (bad, sql):
        script.chmod(0o644)
        r = run_cli("validate", "--bench", "tpcc", "--script", str(script), "--duration",
                    "30s", "--shared-buffers", "128MB", "--scale", "1", "--run-seconds", "3",
                    "--warmup-seconds", "1", timeout=400)
        line = one_error(r)
        assert r.returncode == 2 and f"--script {script.name}" in line, r.stderr[-2000:]
        assert scratch_dirs() == dirs and host_state() == host


def test_json_holds_no_nan():
    """No output holds NaN or infinity: an effect of one epoch has no interval, written as
    null, and the writer refuses NaN outright (allow_nan=False)."""
    from hpadvise.benchmarks import stats
    e = stats.paired_effect([100.0], [101.0])
    doc = stats.finite({"effects": [{"pct": e.pct, "lo_pct": e.lo_pct, "hi_pct": e.hi_pct}],
                        "x": [math.nan]})
    text = json.dumps(doc, allow_nan=False)
    assert "NaN" not in text and "Infinity" not in text and json.loads(text)["x"] == [None]
    with pytest.raises(ValueError):
        json.dumps({"pct": math.nan}, allow_nan=False)
