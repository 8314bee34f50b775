"""A short real validate against a scratch cluster: the whole loop, every variant, reports,
and the host restored afterwards, also when interrupted."""

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from importlib import resources

import jsonschema
import pytest

from support import end_validate, host_state, run_cli, scratch_dirs

pytestmark = [pytest.mark.integration, pytest.mark.live]



def test_short_validate_every_variant(knobs, tmp_path):
    before, dirs, t0 = host_state(), scratch_dirs(), time.time()
    # 36 s: one block of the five variants takes 22 s here, restarting for each run
    r = run_cli("validate", "--duration", "36s", "--shared-buffers", "128MB", "--clients", "4",
                "--run-seconds", "2", "--warmup-seconds", "2", "--variants",
                "current,recommended,thp-always,thp-never,hugepages-off",
                "--report", str(tmp_path / "r.html"), "--json",
                "--output", str(tmp_path / "r.json"),
                timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "r.json").read_text())
    jsonschema.validate(res, json.loads(
        (resources.files("hpadvise") / "schemas" / "validate-schema.json").read_text()))
    runs = {v: s["runs"] for v, s in res["variants"].items()}
    assert set(runs) == {"current", "recommended", "thp-always", "thp-never", "hugepages-off"}
    assert min(runs.values()) >= 1 and len(set(runs.values())) == 1  # whole blocks
    by = {v: s for v, s in res["variants"].items()}
    assert by["recommended"]["backing"] == "hugetlb"
    assert by["current"]["backing"] == "4k" and by["hugepages-off"]["backing"] == "4k"
    # THP `enabled` does not reach shared memory: the buffers stay on 4 KiB pages
    assert by["thp-always"]["backing"] == "4k" and by["thp-never"]["backing"] == "4k"
    assert res["meta"]["warm_s"] == 2 and res["meta"]["run_s"] == 2
    from hpadvise.facts.probe import pmu_state
    pmu = pmu_state()
    assert res["meta"]["dtlb_counters"] == pmu and "dTLB counters" in r.stdout + r.stderr
    if pmu == "present":  # a host with hardware counters: every run counted
        assert all(s["dtlb"] for s in res["samples"])
    else:  # this VM: said plainly, nothing pretended
        assert pmu.startswith("no PMU in this VM") and not any(s["dtlb"] for s in res["samples"])
    for s in res["samples"]:
        assert s["tps"] > 0 and s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"]
        # one pgbench per run: the warm-up's seconds are plotted but not in the TPS
        measured = [p[1] for p in s["progress"] if p[0] > 2]
        assert measured and [p for p in s["progress"] if p[0] <= 2]
        assert s["tps"] == pytest.approx(sum(measured) / len(measured))
        assert 0 <= s["steal_pct"] < 100 and t0 < s["started"] < time.time()
    pairs = {(e["a"], e["b"]) for e in res["effects"]}
    assert pairs == {("current", "recommended"), ("thp-never", "thp-always"),
                     ("current", "hugepages-off")}
    page = (tmp_path / "r.html").read_text()
    assert page.count("<svg") >= 5 and "verdict" in page
    assert "Effects" in r.stdout and "Variants" in r.stdout
    assert "CPU steal during the measured parts" in page and "CPU steal" in r.stdout
    # no terminal here: plain progress lines, one per setup step and per finished run
    assert "loading pgbench data (scale" in r.stdout
    assert re.search(r"^block 1 current: [\d,]+ TPS  \(elapsed \d+s, budget left \d+s\)$",
                     r.stdout, re.M), r.stdout[:2000]
    assert host_state() == before
    assert scratch_dirs() == dirs


def test_short_validate_mysql_tpcc(knobs, tmp_path):
    """validate --db mysql --bench tpcc with the default variants: a scratch MariaDB server
    and its copy side by side, TPC-C runs on both variants, large pages really in use for
    `recommended`, the THP variants skipped (MariaDB turns THP off), the host restored."""
    before, dirs = host_state(), scratch_dirs()
    # 25 s held three epochs here (40 s five) after the setup: both servers need two
    r = run_cli("validate", "--db", "mysql", "--bench", "tpcc", "--duration", "25s",
                "--shared-buffers", "256MB", "--clients", "4", "--run-seconds", "3",
                "--report", str(tmp_path / "r.html"), "--json",
                "--output", str(tmp_path / "r.json"),
                timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["meta"]["bench"] == "tpcc" and res["meta"]["db"] == "mysql"
    assert "MariaDB" in res["meta"]["server_version"]
    # side by side with a copy of the loaded server, each server on both variants in turn
    assert res["meta"]["design"] == "simultaneous", res["meta"]["design"]
    assert {(x["variant"], x["server"]) for x in res["samples"]} == {
        (v, srv) for v in ("current", "recommended") for srv in (0, 1)}
    assert "innodb_flush_log_at_trx_commit = 2" in res["meta"]["settings_note"]
    assert "innodb_log_file_size = 1G" in res["meta"]["settings_note"]
    # the default variants: MariaDB turns THP off for itself, so the THP phases are skipped,
    # and the design's reason no longer speaks of them
    assert set(res["meta"]["skipped"]) == {"thp-never", "thp-always"}, res["meta"]["skipped"]
    assert "phases" not in res["meta"]["design_reason"], res["meta"]["design_reason"]
    by = res["variants"]
    assert by["recommended"]["runs"] == by["current"]["runs"] >= 2
    # every run on its own variant's pages, on either server
    assert {(x["variant"], x["backing"]) for x in res["samples"]} == \
        {("current", "4k"), ("recommended", "hugetlb")}
    for s in res["samples"]:
        assert s["tps"] > 0 and s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"]
        assert s["progress"]
    assert [(e["a"], e["b"]) for e in res["effects"]] == [("current", "recommended")]
    page = (tmp_path / "r.html").read_text()
    assert "innodb_buffer_pool_size" in page and "MariaDB" in page and "<svg" in page
    assert host_state() == before
    assert scratch_dirs() == dirs


def test_validate_bad_input_mysql():
    for args, needle in [
        (["--db", "mysql", "--bench", "pgbench"], "does not run on --db mysql"),
        (["--db", "oracle"], "--db oracle: no such engine"),
        (["--db", "redis"], "validate does not support engine redis"),
        (["--db", "mysql", "--instance", "3306"], "scratch MariaDB"),
        (["--db", "mysql", "--scale", "0"], "at least 1"),
    ]:
        r = run_cli("validate", "--duration", "1m", *args)
        assert r.returncode == 2, (args, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], (args, r.stderr)


def _hidden_binary(path: str, *args: str) -> subprocess.CompletedProcess:
    """Run validate in a private mount namespace where `path` is /dev/null (not executable):
    the binary is missing for this process only, the host keeps its own."""
    import shlex
    cli = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "hpadvise.cli", "validate",
                                            "--duration", "1m", *args])
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           f"mount --bind /dev/null {shlex.quote(path)} && exec {cli}"],
                          capture_output=True, text=True, timeout=120)


def test_missing_benchmark_binaries(knobs):
    from hpadvise.plugins.postgres.validate.bench import pg_bindir
    before, dirs = host_state(), scratch_dirs()
    for path, args, needle in [
            (f"{pg_bindir()}/pgbench", [], "pgbench not found"),
            (shutil.which("sysbench"), ["--db", "mysql"], "sysbench not found")]:
        r = _hidden_binary(path, *args)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert needle in lines[0] and "apt-get install" in lines[0]
    assert os.access(f"{pg_bindir()}/pgbench", os.X_OK)  # only hidden in the namespace
    assert host_state() == before and scratch_dirs() == dirs


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_restores_everything(knobs, tmp_path, sig):
    before, dirs = host_state(), scratch_dirs()
    p = subprocess.Popen(
        [sys.executable, "-m", "hpadvise.cli", "validate", "--duration", "300s",
         "--shared-buffers", "128MB", "--clients", "4", "--run-seconds", "4",
         "--variants", "current,recommended", "--json", "--output", str(tmp_path / "r.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # SIGINT as at a terminal: a suite started as a background job of a non-interactive
        # shell inherits it ignored (bash ignores SIGINT for asynchronous commands without
        # job control), and Python then installs no KeyboardInterrupt handler at all
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # wait until a run of the recommended variant has the pool and huge_pages=on in place
    deadline = time.time() + 120
    while time.time() < deadline:
        nr = int(open("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read())
        if nr > 0:
            break
        time.sleep(0.2)
    assert nr > 0, "the recommended variant never started"
    # SIGINT once a first run is measured (its progress line is out), SIGTERM at once: a
    # validate interrupted before any sample writes no report (nothing of None), one line
    # instead
    if sig == signal.SIGINT:
        seen = []
        while time.time() < deadline + 60:
            line = p.stdout.readline()
            seen.append(line)
            if not line or re.match(r"(epoch|block) 1\b.* TPS", line):
                break
        assert seen[-1], "validate ended before a run was measured: " + "".join(seen)[-1500:]
    else:
        time.sleep(1)
    p.send_signal(sig)
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        end_validate(p, dirs)  # left running, it would change pools under the next tests
        raise AssertionError(f"validate ran on for 120 s after {sig.name}") from None
    assert p.returncode == 130, err[-1500:]
    assert host_state() == before
    assert scratch_dirs() == dirs
    if not (tmp_path / "r.json").exists():  # nothing measured yet: said, and no report
        assert "interrupted before anything was measured" in err, err[-1500:]
        assert sig == signal.SIGTERM, "a measured run, and no report"
        return
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["meta"]["interrupted"] is True
    assert "Effects" in out  # the verdict on what was measured


@pytest.mark.parametrize("db", ["postgres", "mysql"])
def test_sigterm_while_the_original_restarts_after_its_copy(knobs, tmp_path, db):
    """SIGTERM raised as the scratch server starts again after its copy was made (side by
    side): the copy is already among the servers validate removes, so nothing is left. The
    copy's directory used to stay behind (the suite met it once, SIGTERM 1 s in)."""
    from hpadvise.benchmarks import runner
    before, dirs = host_state(), scratch_dirs()
    sent: list[str] = []
    lua = tmp_path / "one.lua"  # a script of the user's: no data to load first
    lua.write_text('function event()\n  sysbench.sql.driver():connect():query("SELECT 1")\n'
                   'end\n')
    tmp_path.chmod(0o755)

    def on_update(state):
        if state.phase.startswith("copying the server") and not sent:
            server = v.target.c if db == "postgres" else v.target.m
            start = server.start

            def start_then_term(*a, **kw):
                r = start(*a, **kw)
                sent.append(server.tmp)
                os.kill(os.getpid(), signal.SIGTERM)  # raised by validate's own handler
                return r
            server.start = start_then_term
    v = runner.Validation(runner.Options(
        variants=["current", "recommended"], duration_s=60, db=db, clients=2, run_s=2,
        warm_s=1, buffers="128MB" if db == "postgres" else "256MB", design="simultaneous",
        bench="pgbench" if db == "postgres" else "tpcc", scale=1,
        script=None if db == "postgres" else str(lua)), on_update=on_update)
    v.run()
    assert sent and v.interrupted and not v.samples
    assert scratch_dirs() == dirs and host_state() == before


@pytest.mark.parametrize("args,msg", [
    (["--duration", "10x"], "is not a duration"),
    (["--variants", "current,fastest"], "unknown variant 'fastest'"),
    (["--variants", "current"], "at least two variants"),
    (["--scale", "100000000"], "lower --scale"),
    (["--target-ci", "tight"], "not a percentage"),
    (["--run-seconds", "0"], "at least 1 second"),
    (["--warmup-seconds", "-1"], "give 0 or more"),
    (["--run-grace", "0"], "--run-grace 0: give at least 1 second"),
])
def test_bad_input_changes_nothing(knobs, args, msg):
    before, dirs = host_state(), scratch_dirs()
    r = run_cli("validate", *args)
    assert r.returncode == 2 and msg in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert host_state() == before and scratch_dirs() == dirs


def _our_children_named(name: str) -> list[int]:
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:]
        if comm == name and int(rest.split()[1]) == os.getpid():
            out.append(int(d))
    return out


def test_a_run_that_does_not_end_is_stopped(knobs):
    """A run whose clients never finish (here pgbench itself is stopped with SIGSTOP once the
    second block measures, as a hung server would hold it) is ended at warm-up + run + the
    grace: validate ends with the runs before it, says which run hung, and restores
    everything."""
    from hpadvise.benchmarks import runner
    before, dirs = host_state(), scratch_dirs()
    stopped: list[int] = []

    def on_update(state):
        if state.block >= 2 and v.o.run_grace_s > 1:  # block 1's runs keep a slow start's margin
            v.o = dataclasses.replace(v.o, run_grace_s=1)
        if state.phase == "measuring" and state.block >= 2 and not stopped:
            for pid in _our_children_named("pgbench"):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
    v = runner.Validation(runner.Options(
        variants=["current", "recommended"], duration_s=300, db="postgres", clients=2,
        run_s=2, warm_s=1, buffers="128MB", design="restart", run_grace_s=3),
        on_update=on_update)
    v.run()  # without the limit it would wait for the stopped pgbench for ever
    assert stopped, "no pgbench was found to stop"
    assert v.failed and "the run of " in v.failed and "in block 2 was still going" in v.failed
    res = v.result()
    assert res["meta"]["stopped"] == v.failed and not res["meta"]["interrupted"]
    assert {s["block"] for s in res["samples"]} == {0}  # block 1 (0 here) was kept whole
    assert not [p for p in stopped if os.path.exists(f"/proc/{p}")]
    assert host_state() == before and scratch_dirs() == dirs


def test_side_by_side_designs_refuse_what_they_cannot_measure(knobs):
    """THP variants are host-wide, a running instance cannot be doubled: an explicit resident
    or simultaneous design says so, auto falls back to restarting and says why."""
    before, dirs = host_state(), scratch_dirs()
    r = run_cli("validate", "--variants", "current,thp-always", "--design", "resident")
    assert r.returncode == 2 and "host-wide THP" in r.stderr and "--design restart" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run_cli("validate", "--design", "fastest")
    assert r.returncode == 2 and "unknown design 'fastest'" in r.stderr
    assert host_state() == before and scratch_dirs() == dirs


def test_existing_instance_in_a_scratch_database(pg_factory, knobs, tmp_path):
    c = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    c.start()
    dbs = c.psql("SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_database")
    before = host_state(c)
    r = run_cli("validate", "--instance", str(c.port), "--duration", "20s")
    assert r.returncode == 2 and "--allow-restart" in r.stderr
    assert host_state(c) == before
    r = run_cli("validate", "--instance", str(c.port), "--allow-restart", "--duration", "20s",
                "--clients", "2", "--run-seconds", "2", "--variants", "current,recommended",
                "--json", "--output", str(tmp_path / "r.json"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "r.json").read_text())
    assert {s["variant"]: s["backing"] for s in res["samples"]} == {
        "current": "4k", "recommended": "hugetlb"}
    assert res["meta"]["target"] == f"instance {c.port}"
    # its own files are the instance's: validate wrote none to put on disk, and says none
    assert "writing the servers' files" not in r.stdout + r.stderr
    # the instance runs again as before; the scratch database is gone
    assert c.running() and c.psql("SHOW huge_pages") == "try"
    assert c.psql("SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_database") == dbs
    assert host_state(c) == before


def test_instance_that_is_down(pg_factory, knobs):
    c = pg_factory({"shared_buffers": "64MB"})
    r = run_cli("validate", "--instance", c.datadir, "--allow-restart", "--duration", "20s")
    assert r.returncode == 2 and "is not running" in r.stderr


def test_scratch_size_follows_the_running_instance(pg_factory, knobs, tmp_path):
    """Without --shared-buffers the scratch server gets the buffers of the largest running
    instance of the engine (here a throwaway one larger than the system's), and says so."""
    c = pg_factory({"shared_buffers": "384MB", "huge_pages": "off"})
    c.start()
    before = host_state(c)
    r = run_cli("validate", "--duration", "12s", "--clients", "2", "--run-seconds", "2",
                "--warmup-seconds", "1", "--scale", "2", "--variants", "current,hugepages-off",
                "--json", "--output", str(tmp_path / "r.json"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((tmp_path / "r.json").read_text())["meta"]
    assert m["shared_buffers"] == "384MB"
    assert m["buffers_source"] == f"follows shared_buffers of postgres:{c.port}"
    said = " ".join(r.stdout.split())  # the table output wraps at 120 columns
    assert f"384MB (follows shared_buffers of postgres:{c.port})" in said
    assert host_state(c) == before
