"""validate as users type it: the default command, its plan's comparison side by side while
THP settings take turns as phases."""

import json
import os

import pytest

from support import host_state, run_cli, scratch_dirs

pytestmark = [pytest.mark.integration, pytest.mark.live]


def test_the_default_command_runs_the_plan_side_by_side_with_thp_phases(knobs, tmp_path):
    """`validate` with a short budget and short runs (the default variants and workload): the
    plan's comparison runs side by side (simultaneous, two CPUs here) in every epoch while
    THP enabled takes turns as phases (never, always, always, never, ...), each comparison
    states how it was measured, the report leads with the plan's answer, the client ran
    pgbench's TPC-B script, and the host is as before."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("the simultaneous design needs 2 CPUs; this host gives us "
                    f"{len(os.sched_getaffinity(0))}")
    before, dirs = host_state(), scratch_dirs()
    # 22 s holds about four epochs of 5 s here: two cycles of the THP phases, more than the
    # one cycle and three epochs asked below
    r = run_cli("validate", "--duration", "22s", "--shared-buffers", "128MB", "--clients", "4",
                "--run-seconds", "3", "--warmup-seconds", "1", "--json",
                "--output", str(tmp_path / "r.json"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "r.json").read_text())
    m = res["meta"]
    assert m["variants"] == ["current", "recommended", "thp-never", "thp-always"]
    assert m["design"] == "simultaneous" and m["phases"] == ["thp-never", "thp-always"]
    assert m["side_by_side"] == ["current", "recommended"] and m["workload"] == "tpcb"
    how = {(e["a"], e["b"]): (e["design"], e["unit"], e["n"]) for e in res["effects"]}
    plan, thp = how[("current", "recommended")], how[("thp-never", "thp-always")]
    assert plan[:2] == ("simultaneous", "epoch") and plan[2] >= 3
    assert thp[:2] == ("THP phases", "cycle") and thp[2] >= 1
    by_epoch: dict[int, list] = {}
    for s in res["samples"]:
        by_epoch.setdefault(s["epoch"], []).append(s)
    order = [by_epoch[e][0]["phase"] for e in sorted(by_epoch)]
    # ABBA cycles, as many as the budget holds: a faster host fits more epochs than 3 cycles
    abba = ["thp-never", "thp-always", "thp-always", "thp-never"]
    assert order == [abba[i % len(abba)] for i in range(len(order))]
    for e, runs in by_epoch.items():
        # both servers in every round, at the same time, on the phase's THP setting
        assert sorted(s["variant"] for s in runs) == sorted(["current", "recommended"]
                                                             * (len(runs) // 2))
        for s in runs:
            assert s["thp_modes"]["enabled"] == s["phase"].removeprefix("thp-"), s
            assert s["backing"] == ("hugetlb" if s["variant"] == "recommended" else "4k")
            # the speed probe read the CPUs it sat on (speed.py), and is gone
            assert s["cpu_speed"] is not None and s["cpu_speed"] > 0, s
        for blk in {s["block"] for s in runs}:
            starts = [s["started"] for s in runs if s["block"] == blk]
            assert len(starts) == 2 and abs(starts[0] - starts[1]) < 1
    # the THP variants' figures are current's server in their phase
    assert res["variants"]["thp-always"]["runs"] == len(
        [s for s in res["samples"] if s["variant"] == "current" and s["phase"] == "thp-always"])
    # the default workload is pgbench's own TPC-B script: no -S, no -f, prepared statements
    cmd = m["bench_commands"]["current"]
    assert os.path.basename(cmd[0]) == "pgbench" and "-S" not in cmd and "-f" not in cmd
    assert cmd[cmd.index("-M") + 1] == "prepared"
    # apply's plan for both servers from validate's one survey of the host, taken before
    # anything changed, which check's THP plan is quoted from as well
    assert m["plan_inspections"] == 1, m["plan_inspections"]
    assert m["plan_thp"]["enabled"] in ("always", "madvise", "never"), m["plan_thp"]
    # the copies and the loaded data went to disk in the setup, before the first epoch
    assert r.stdout.index("writing the servers' files to disk") < r.stdout.index("epoch 1 ")
    # the report leads with the plan's answer, then the tables; the phases are stated
    out = r.stdout[r.stdout.index("Apply the plan?"):]
    assert out.index("Apply the plan?") < out.index("Variants") < out.index("Effects")
    assert "THP phases: thp-never / thp-always in turn" in " ".join(out.split())
    # what share of the run measured: the runs' measured parts, side by side counted once
    assert 0 < m["measured_s"] < m["elapsed_s"], (m["measured_s"], m["elapsed_s"])
    assert m["measured_s"] <= len({s["block"] for s in res["samples"]}) * m["run_s"] + 1
    took = m["elapsed_s"] + m["setup_s"]
    assert (f"Measured {m['measured_s']:,.0f} s of the {took:,.0f} s this run took"
            in " ".join(r.stdout.split()))
    assert host_state() == before and scratch_dirs() == dirs
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _is_probe(p)]


def _is_probe(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"SCHED_FIFO" in f.read()
    except OSError:  # a process that ended meanwhile
        return False


def test_a_budget_too_short_for_thp_phases_keeps_the_plans_comparison(knobs, tmp_path):
    """The default command with a budget that cannot hold THP phases at runs of the minimum
    length: the phases go, the report says so and which budget keeps them, and the plan's
    comparison is measured alone, side by side."""
    from hpadvise.benchmarks.budget import MIN_RUN_S
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("the simultaneous design needs 2 CPUs; this host gives us "
                    f"{len(os.sched_getaffinity(0))}")
    before, dirs = host_state(), scratch_dirs()
    r = run_cli("validate", "--duration", "15s", "--shared-buffers", "128MB", "--clients", "2",
                "--warmup-seconds", "1", "--json", "--output", str(tmp_path / "r.json"),
                timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((tmp_path / "r.json").read_text())["meta"]
    assert m["variants"] == ["current", "recommended"] and m["phases"] == []
    assert m["design"] == "simultaneous"
    # even without the phases 15 s holds no 3 epochs: runs of the minimum, one epoch here
    assert m["run_s"] == MIN_RUN_S
    assert any(n.startswith(f"runs of {MIN_RUN_S} s, the shortest that says something: 15 s "
                            "holds fewer than 3 epochs") for n in m["default_notes"]), m
    for v in ("thp-never", "thp-always"):
        assert m["skipped"][v].startswith("a budget of 15 s holds too few epochs of "
                                          f"{MIN_RUN_S} s runs"), m["skipped"]
        assert f"{v} skipped: a budget of 15 s" in r.stdout
    assert host_state() == before and scratch_dirs() == dirs


@pytest.mark.parametrize("free_gib,scale,refused", [
    (40, 409, False),   # 8 GB of buffers, two servers: the default scale fits
    (16, 0, False),     # it does not: the data shrinks to what the disk holds, said why
    (6, 0, True),       # not even a quarter of it fits: one line, what to do
])
def test_the_default_scale_follows_the_disk(monkeypatch, free_gib, scale, refused):
    """validate's checks on a disk that holds the default data, one that holds less of it,
    and one that holds too little (the free bytes as such a disk reports them): nothing is
    created or changed before these checks."""
    import shutil

    from hpadvise.benchmarks import budget, options, runner
    from hpadvise.kit.errors import InputError
    usage = shutil.disk_usage("/")
    monkeypatch.setattr(options.shutil, "disk_usage",
                        lambda p: usage._replace(free=free_gib << 30))
    o = runner.Options(variants=["current", "recommended"], duration_s=600, db="postgres",
                       buffers="8GB", design="simultaneous", clients=4)
    v = runner.Validation(o)
    if refused:
        with pytest.raises(InputError, match="need ~.* of disk .* lower --scale"):
            v.preflight()
        return
    v.preflight()
    assert o.scale is None and not o.default_notes  # the given options stay as given
    o = v.o  # settled
    fit = budget.fitting_scale(free_gib << 30, 15, 2, 4 << 30)
    assert o.scale == (scale or fit), o.default_notes
    if scale:
        assert not o.default_notes
    else:
        assert o.scale < 409 and o.default_notes == (
            f"scale {fit} instead of 409: 2 servers with 8 GiB of buffers would hold "
            f"~{options.fmt_bytes(budget.disk_need(409, 15, 2, 4 << 30))} of data and WAL, "
            f"{free_gib} GiB is free in {options.tempfile.gettempdir()} (TMPDIR)",)


def test_the_scratch_servers_run_as_said_and_one_that_fails_to_stop_costs_no_knob(knobs):
    """One run, two promises. While the runs measure, every scratch server really runs with
    what the report says it differs by from PostgreSQL's defaults (no checkpoint within an
    epoch, commits that do not wait for the shared disk, no full-page writes), the clients
    default to the host's CPUs (at least 16) but no more a server than pgbench_branches has
    rows, and the report names both. Then each scratch
    server's stop fails (the target's stop raises from the first measured run on): validate's
    restore records it and still puts every pool and THP knob back and removes the scratch
    servers; before, the failing stop skipped the rest."""
    from hpadvise.benchmarks import runner, wording
    from hpadvise.benchmarks.budget import default_clients
    from hpadvise.benchmarks.switching import ValidateError
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("the simultaneous design needs 2 CPUs; this host gives us "
                    f"{len(os.sched_getaffinity(0))}")
    before, dirs = host_state(), scratch_dirs()
    seen: dict[str, str] = {}
    shows = ("synchronous_commit", "full_page_writes", "checkpoint_timeout", "max_wal_size",
             "wal_level")

    def fails():
        raise RuntimeError("pg_ctl: could not send stop signal")

    def on_update(state):
        if state.phase == "measuring" and not seen:
            for t, _ in v.made:
                for name in shows:
                    seen[f"{t.c.port}:{name}"] = t.c.psql(f"SHOW {name}")
                t.stop = fails
    v = runner.Validation(runner.Options(
        variants=["current", "recommended"], duration_s=30, db="postgres", run_s=2, warm_s=1,
        buffers="128MB", design="simultaneous"), on_update=on_update)
    try:
        v.run()
    except ValidateError as exc:  # the next epoch's stop, if the budget held one: one line
        assert "could not send stop signal" in str(exc)
    assert len(seen) == 2 * len(shows), seen  # both servers, asked while they ran
    for key, value in seen.items():
        name = key.split(":")[1]
        assert value == {"synchronous_commit": "off", "full_page_writes": "off",
                         "checkpoint_timeout": "1h", "max_wal_size": "4GB",
                         "wal_level": "replica"}[name], (key, value)
    m = v.meta
    n, why = default_clients()
    # 128MB hold scale 6: 6 clients a server, one per pgbench_branches row, not 2 per CPU
    assert n >= 16 and v.o.scale == 6 and m["clients"] == 12, (m["clients"], v.o.scale)
    (why,) = m["default_notes"]
    assert why.startswith("12 clients, 6 a server: at scale 6 more would queue on "
                          "pgbench_branches' rows") and f"instead of {n}" in why, why
    line = wording.server_line(m)
    assert "synchronous_commit = off" in line and "full_page_writes = off" in line
    assert wording.defaults_line(m) == f"chosen for this host: {why}"
    errors = m["restore_errors"]
    assert errors and all(e.startswith("stopping a scratch server: pg_ctl") for e in errors)
    assert host_state() == before and scratch_dirs() == dirs
