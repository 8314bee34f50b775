"""A short real validate against a scratch cluster: the whole loop, every variant, reports,
and the host restored afterwards, also when interrupted."""

import contextlib
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

from support import (GiganticRoom, NoGiganticPages, end_validate, host_state, run_cli,
                     scratch_dirs)

pytestmark = [pytest.mark.integration, pytest.mark.live]



def test_short_validate_every_variant(knobs, tmp_path):
    before, dirs, t0 = host_state(), scratch_dirs(), time.time()
    r = run_cli("validate", "--duration", "60s", "--shared-buffers", "128MB", "--clients", "4",
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
    r = run_cli("validate", "--db", "mysql", "--bench", "tpcc", "--duration", "40s",
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


@pytest.mark.parametrize("design", ["restart", "resident", "simultaneous"])
def test_every_run_is_on_its_variants_pages(knobs, tmp_path, design):
    """Over several blocks in both orders, current stays on 4 KiB pages and recommended on huge
    pages: a variant's pool must not leak into the next run (surplus pages, ABBA order), nor
    into the other server when both are resident.

    Restarting per run and side by side, the same run asks for hugepages-1g too while no
    runtime 1 GiB page can be had, whatever the host's history: one memory block of every
    1 GiB range is offline (support.NoGiganticPages), the rest of memory available. A 1 GiB
    pool the kernel cannot grow drops that variant only (held for the whole run, restarting):
    the others are measured, the report names the skip with the kernel's answer, and the
    pools are back afterwards."""
    before, dirs = host_state(), scratch_dirs()
    gig_file = "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
    gig = design != "simultaneous" and "pdpe1gb" in open("/proc/cpuinfo").read()
    with NoGiganticPages() if gig else contextlib.nullcontext() as blocked:
        if blocked is not None and blocked.why:
            gig = False  # the pages are still proven; the skip cannot be, said below
        if gig:
            assert knobs.pool(1048576, 1) == 0, "a 1 GiB page was still granted"
        # resident: both servers' setups come out of the budget too; 40 s holds two epochs
        # on a busy machine as well (30 s held exactly two on a quiet one, as 20 s did
        # restarting); side by side, 20 s held four
        budget = {"resident": "40s", "restart": "30s"}.get(design, "20s")
        r = run_cli("validate", "--duration", budget, "--shared-buffers", "128MB", "--clients",
                    "2", "--run-seconds", "2", "--warmup-seconds", "1", "--variants",
                    "current,recommended" + (",hugepages-1g" if gig else ""), "--design",
                    design, "--json", "--output", str(tmp_path / "r.json"), timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        assert not gig or int(open(gig_file).read()) == 0  # the pool as validate found it
    res = json.loads((tmp_path / "r.json").read_text())
    m, samples = res["meta"], res["samples"]
    if gig:
        why = m["skipped"]["hugepages-1g"]
        assert "granted 0 of 1 pages for pool 1 GiB" in why, why
        assert "hugepages-1g skipped: the kernel granted" in " ".join(r.stdout.split())
    assert m["variants"] == ["current", "recommended"]
    assert {s["variant"] for s in samples} == {"current", "recommended"}
    assert m["design"] == design and f"design: {design}" in r.stdout
    assert len({s["block"] for s in samples}) >= 2
    for s in samples:
        want = "hugetlb" if s["variant"] == "recommended" else "4k"
        assert s["backing"] == want, (s["block"], s["variant"], s["backing"])
    epochs = sorted({s["epoch"] for s in samples})
    assert res["effects"][0]["n"] == len(epochs) >= 2
    if design == "restart":
        assert all(s["epoch"] == s["block"] and s["cpus"] is None for s in samples)
    else:  # every epoch holds whole rounds: each variant once per round
        rounds = m["rounds"]  # one side by side, where the servers trade CPUs in the run
        assert rounds == (2 if design == "resident" else 1)
        assert len(samples) == 2 * rounds * len(epochs)
        # the variants change servers between epochs (the loaded one and its copy), and each
        # server still ran on its variant's pages (above)
        for ep in epochs:
            on = {s["variant"]: s["server"] for s in samples if s["epoch"] == ep}
            assert sorted(on.values()) == [0, 1], (ep, on)
        assert {s["server"] for s in samples if s["variant"] == "recommended"} == {0, 1}
    if design == "simultaneous":
        # both servers measured at once, on disjoint CPUs
        for blk in {s["block"] for s in samples}:
            pair = [s for s in samples if s["block"] == blk]
            assert len(pair) == 2 and not set(pair[0]["cpus"]) & set(pair[1]["cpus"])
            assert abs(pair[0]["started"] - pair[1]["started"]) < 1
        # each variant's starting CPU rotates from block to block: both, over the epochs
        for v in ("current", "recommended"):
            cpus = [tuple(s["cpus"]) for s in sorted(samples, key=lambda s: s["block"])
                    if s["variant"] == v]
            assert len(set(cpus)) == 2 and cpus[0] != cpus[1], (v, cpus)
        # and within every run they traded CPUs on the swap grid, each trade read back off
        # the server and its clients: at least one per piece of the measured part
        assert m["swap_s"] > 0
        low = [(s["block"], s["trades"]) for s in samples
               if s["trades"] < round(m["run_s"] / m["swap_s"])]
        assert not low, (m["run_s"], m["swap_s"], low)
    else:
        assert all(s["trades"] is None for s in samples)
    # page tables are each server's own (VmPTE), not the host's: measured at the same moment,
    # the 4 KiB server's backends map the buffers with PTEs, the huge page server's do not
    pt = {v: sum(s["page_tables_kb"] for s in samples if s["variant"] == v)
          for v in ("current", "recommended")}
    assert pt["current"] > pt["recommended"] > 0, pt
    assert host_state() == before and scratch_dirs() == dirs
    if design != "simultaneous" and not gig:
        pytest.skip("pages proven; the hugepages-1g skip was not: " + (
            blocked.why if blocked is not None and blocked.why else "no 1 GiB pages on this CPU"))


def test_a_a_run_on_huge_pages_side_by_side(knobs, tmp_path):
    """The same variant twice (an A/A run): two servers of the recommended variant at once,
    both on huge pages from one pool held for both, compared with each other, and the report
    reads the comparison as this host's noise."""
    before, dirs = host_state(), scratch_dirs()
    r = run_cli("validate", "--duration", "15s", "--shared-buffers", "128MB", "--clients", "2",
                "--run-seconds", "2", "--warmup-seconds", "1", "--variants",
                "recommended,recommended", "--design", "simultaneous", "--json",
                "--output", str(tmp_path / "r.json"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "r.json").read_text())
    m = res["meta"]
    assert m["variants"] == ["recommended", "recommended#2"]
    assert [(e["a"], e["b"]) for e in res["effects"]] == [("recommended", "recommended#2")]
    assert {s["variant"] for s in res["samples"]} == {"recommended", "recommended#2"}
    assert all(s["backing"] == "hugetlb" for s in res["samples"])
    # one pool for both servers, held for the whole run: twice what one server needs
    held = [k for k in m["variant_knobs"]["recommended"] if "held for the whole run" in k]
    assert len(held) == 1 and held == [k for k in m["variant_knobs"]["recommended#2"]
                                       if "held" in k]
    # (the pool was empty: two equal needs, and 128 MB of buffers are >= 64 2 MiB pages each)
    n = int(re.search(r"= (\d+) \(held", held[0]).group(1))
    assert n % 2 == 0 and n >= 2 * 64, held
    assert "A/A (recommended#2 against recommended" in r.stdout
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


def test_thp_variants_as_dbas_mean_them_and_1g_pages(knobs, tmp_path):
    """thp-always changes THP `enabled` only (PostgreSQL's shared memory stays off THP),
    thp-shmem changes `shmem_enabled` only (and the buffers go on THP), hugepages-1g puts the
    server on 1 GiB pages; every knob each variant changed is named, and all are restored."""
    if "pdpe1gb" not in open("/proc/cpuinfo").read():
        pytest.skip("no 1 GiB pages on this CPU")
    GiganticRoom.make()  # room for validate's 1 GiB pool, however fragmented RAM is
    before, dirs = host_state(), scratch_dirs()
    r = run_cli("validate", "--duration", "40s", "--shared-buffers", "128MB", "--clients", "2",
                "--run-seconds", "2", "--warmup-seconds", "1",
                "--variants", "current,thp-always,thp-shmem,hugepages-1g",
                "--json", "--output", str(tmp_path / "r.json"), timeout=600)
    if r.returncode == 1 and "of 1 pages for pool 1 GiB" in r.stderr:
        # memory too fragmented for a runtime 1 GiB page (after large runs on this host):
        # validate said so in one line and restored everything; the rest cannot be checked
        assert host_state() == before and scratch_dirs() == dirs
        pytest.skip("the kernel could not grant a 1 GiB page at runtime: " + r.stderr.strip())
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "r.json").read_text())
    # the THP modes the advice quotes are check's own plan for this host
    chk = json.loads(run_cli("check", "--json").stdout)
    want = {b["knob"][4:]: b["plan"] for b in chk["plan"]["boot"]
            if b["knob"].startswith("thp.") and b["plan"]}
    assert want and {k: res["meta"]["plan_thp"].get(k) for k in want} == want
    if "hugepages-1g" in res["meta"]["skipped"]:
        # memory too fragmented for a runtime 1 GiB page: the pool is held for the whole run
        # (restart design), so validate dropped that variant alone and measured the rest
        assert host_state() == before and scratch_dirs() == dirs
        assert set(res["meta"]["variants"]) == {"current", "thp-always", "thp-shmem"}
        pytest.skip("the kernel could not grant a 1 GiB page at runtime: "
                    + res["meta"]["skipped"]["hugepages-1g"])
    knobs_of = res["meta"]["variant_knobs"]
    assert knobs_of["thp-always"] == ["transparent_hugepage/enabled = always"]
    assert knobs_of["thp-shmem"] == ["transparent_hugepage/shmem_enabled = always"]
    gig = knobs_of["hugepages-1g"]
    assert any(k.startswith("pool 1 GiB = ") and k.endswith("(held for the whole run)")
               for k in gig), gig
    assert any(k.startswith("huge_page_size") and k.endswith("= 1GB") for k in gig)
    assert any(k.startswith("huge_pages") and k.endswith("= on") for k in gig)
    assert res["meta"]["thp_defrag"] and not res["meta"]["skipped"]
    on = {}
    for s in res["samples"]:
        on.setdefault(s["variant"], set()).add(s["backing"])
    assert on["thp-always"] == {"4k"}  # enabled=always does not reach shared memory
    # ShmemHugePages is host-wide: thp-always adds none to what the host had, thp-shmem does
    shm = {v: max(s["shmem_huge_kb"] for s in res["samples"] if s["variant"] == v)
           for v in ("current", "thp-always", "thp-shmem")}
    assert shm["thp-always"] == shm["current"] < shm["thp-shmem"], shm
    assert on["thp-shmem"] == {"thp"}
    assert on["hugepages-1g"] == {"hugetlb"}
    out = r.stdout + r.stderr
    assert "transparent_hugepage/enabled = always" in out and "THP defrag left" in out
    assert host_state() == before and scratch_dirs() == dirs


def test_thp_variants_are_skipped_for_a_server_that_turned_thp_off(knobs):
    """MariaDB turns THP off for itself (prctl): THP variants cannot reach it, and validate
    says so instead of measuring nothing."""
    before = host_state()
    r = run_cli("validate", "--db", "mysql", "--bench", "tpcc", "--duration", "30s",
                "--shared-buffers", "256MB", "--clients", "2", "--scale", "1",
                "--variants", "current,thp-always", timeout=600)
    assert r.returncode == 2, r.stdout[-1000:] + r.stderr[-1000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("hpadvise: error")]
    assert lines and "turned THP off for itself" in lines[0], r.stderr[-1000:]
    assert host_state() == before


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

