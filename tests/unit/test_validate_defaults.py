"""validate's defaults that the host decides: clients by the CPUs this process may use, the
data's scale by the disk the scratch servers share, and the 1 GiB variant only where memory
and disk hold its server too (on a captured host with 1 GiB pages; the disk's free bytes
given, as a small disk would report them)."""

import os
from dataclasses import replace
import shutil

import pytest

from hpadvise.benchmarks import options
from hpadvise.benchmarks.budget import default_clients, disk_need, fitting_scale
from hpadvise.benchmarks.options import Options, gigantic_variant
from hpadvise.facts.host import collect
from hpadvise.planning.pipeline import survey
from hpadvise.facts.sysroot import SysRoot

GIB = 1 << 30


@pytest.mark.parametrize("cpus,clients", [(1, 16), (2, 16), (8, 16), (9, 18), (16, 32),
                                          (64, 128)])
def test_clients_follow_the_cpus(monkeypatch, cpus, clients):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    n, why = default_clients()
    assert n == clients
    assert f"{clients} clients" in why and f"the {cpus} this process" in why


@pytest.mark.parametrize("workload,scale,servers,script,clients", [
    ("tpcb", 6, 2, None, 12),     # 128MB side by side: one client per pgbench_branches row
    ("tpcb", 6, 1, None, 6),      # one server at a time takes them all
    ("tpcb", 3, 3, None, 9),
    ("tpcb", 409, 2, None, 16),   # 8 GB: rows enough for the CPUs' clients
    ("tpcb", 8, 2, None, 16),     # exactly enough
    ("select", 6, 2, None, 16),   # reads queue on no row
    ("tpcb", 6, 2, "own.sql", 16),  # the user's own script: its rows are not known
])
def test_default_clients_stay_within_the_rows_they_update(monkeypatch, workload, scale,
                                                          servers, script, clients):
    """TPC-B updates one of pgbench_branches' rows per transaction, one row per unit of
    scale: more clients a server than rows would mostly measure their queue."""
    from hpadvise.benchmarks.budget import clients_for
    from hpadvise.benchmarks.drivers import BENCHMARKS
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    o = replace(_opts(scale), workload=workload, script=script)
    n, why = clients_for(o, BENCHMARKS["pgbench"], servers)
    assert n == clients
    if clients == 16:
        assert why == default_clients()[1]
    else:
        assert why.startswith(f"{clients} clients")
        assert (f", {scale} a server" in why) == (servers > 1)
        assert f"at scale {scale} more would queue on pgbench_branches' rows" in why
        assert why.endswith("(instead of 16: 2 per CPU, at least 16)")


@pytest.mark.parametrize("free_gib", [10, 54, 64, 200, 1000])
@pytest.mark.parametrize("servers", [1, 2, 3])
def test_fitting_scale_is_the_largest_that_fits(free_gib, servers):
    free, wal = free_gib * GIB, 4 * GIB
    s = fitting_scale(free, 15, servers, wal)
    if s:
        assert disk_need(s, 15, servers, wal) <= free * 0.9
    assert disk_need(s + 1, 15, servers, wal) > free * 0.9 - servers * (15 << 20)
    assert fitting_scale(servers * wal // 2, 15, servers, wal) == 0  # WAL alone overflows


def _opts(scale):
    return Options(variants=["current", "recommended", "thp-never", "thp-always"],
                   duration_s=600, db="postgres", bench="pgbench", scale=scale,
                   variants_given=False)


def free_disk(monkeypatch, gib):
    """The scratch servers' disk as one with `gib` GiB free reports it (statvfs)."""
    usage = shutil.disk_usage("/")
    monkeypatch.setattr(options.shutil, "disk_usage",
                        lambda p: usage._replace(free=gib * GIB))


class _Target:
    wal_bytes = 4 * GIB


@pytest.fixture
def big_host(hosts):
    """A captured 126 GiB host with 1 GiB pages (pdpe1gb, hugepages-1048576kB), as validate's
    survey reads it."""
    return collect(SysRoot(str(hosts / "lazy-126g")))


def test_1g_variant_where_memory_and_disk_hold_a_third_server(big_host, monkeypatch):
    o = _opts(1228)  # 24 GB of buffers at 3/4: ~18 GB of data a server
    free_disk(monkeypatch, 200)
    got = gigantic_variant(o, 24 * GIB, big_host, _Target())
    assert got.variants == (*o.variants, "hugepages-1g") and not got.dropped
    assert "hugepages-1g" not in o.variants  # the options it was given stay as they were


def test_1g_variant_dropped_with_the_reason_on_a_small_disk(big_host, monkeypatch):
    o = _opts(1228)
    free_disk(monkeypatch, 60)
    got = gigantic_variant(o, 24 * GIB, big_host, _Target())
    assert got.variants == o.variants and not o.dropped
    why = got.dropped["hugepages-1g"]
    assert "3 at scale 1228" in why and "60 GiB is free" in why and "--variants" in why


def test_1g_variant_dropped_where_memory_does_not_hold_it(big_host, monkeypatch):
    o = _opts(3000)
    free_disk(monkeypatch, 2000)
    got = gigantic_variant(o, 48 * GIB, big_host, _Target())
    assert got.variants == o.variants
    assert "do not fit in" in got.dropped["hugepages-1g"]


def test_no_1g_variant_below_production_buffers(big_host):
    o = _opts(400)
    assert gigantic_variant(o, 8 * GIB, big_host, _Target()) == o


class _Scratch:
    """A BenchTarget on a scratch server made with the buffers given (checks only)."""
    wal_bytes = GIB
    buffers_setting = "shared_buffers"

    def __init__(self, o):
        self.buffers = o.buffers

    def buffers_bytes(self):
        return options.parse_bytes(self.buffers, "--buffers")

    def twin_blocker(self):
        return None


def _checked(hosts, monkeypatch, target, host="lazy-126g", free_gib=1000, **given):
    """options.check's settled options for `given`, on a captured host (the host surveyed, no
    instance found in it), as root, with `free_gib` free for the scratch servers and two
    CPUs."""
    engine = type("Eng", (), {"name": "postgres", "benches": ("pgbench", "tpcc"),
                              "bench_target": staticmethod(target)})()
    monkeypatch.setattr(options.registry, "get", lambda name: engine)
    monkeypatch.setattr(options, "see", lambda o, eng, sr: replace(o, survey=survey(sr)))
    monkeypatch.setattr(options.os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    free_disk(monkeypatch, free_gib)
    return options.check(Options(**given), SysRoot(str(hosts / host)))[0]


@pytest.mark.parametrize("design,buffers,warm_s,longest", [
    ("auto", "128MB", 3, 15),     # side by side at 128MB: more, shorter epochs
    ("auto", "8GB", 11, 30),      # a start costs 12 s a server, the 4 KiB ramp is long
    ("restart", "128MB", 3, 30),  # one server restarted a run: not measured shorter
])
def test_the_longest_default_run_follows_what_a_start_costs(hosts, monkeypatch, design,
                                                            buffers, warm_s, longest):
    """The default command's 10 minutes: runs of 15 s side by side at 128MB (each start's
    level is most of an epoch's noise there); 30 s where a start costs more. The run length
    is the one validate settles, from the warm-up it derives from the buffers."""
    from hpadvise.benchmarks.budget import run_seconds
    from hpadvise.benchmarks.variants import DEFAULT_VARIANTS, phases_for
    o = _checked(hosts, monkeypatch, _Scratch, variants=list(DEFAULT_VARIANTS),
                 duration_s=600, db="postgres", buffers=buffers, design=design,
                 variants_given=False)
    assert o.warm_s == warm_s and o.run_s == longest
    side = "simultaneous" if design == "auto" else "restart"
    # the budget would have held longer runs: the cap, not the budget, made them this long
    assert run_seconds(o, side, 2, phases_for(o.variants)) > longest


class _Copy:
    """A BenchTarget on copies of a running instance with 1 GiB of data (checks only)."""
    wal_bytes = GIB
    data_bytes = GIB
    buffers_setting = "shared_buffers"

    def __init__(self, o):
        self.source = type("Source", (), {"buffers": "128MB", "label": "copy of main"})()
        self.buffers = o.buffers

    def buffers_bytes(self):
        return 128 << 20

    def twin_blocker(self):
        return None


@pytest.mark.parametrize("design,servers", [("restart", 1), ("resident", 2)])
def test_a_small_disk_for_copies_names_only_what_was_not_given(hosts, monkeypatch, tmp_path,
                                                               design, servers):
    """The copies' disk check on a small TMPDIR: --design restart (one server) is offered
    only where more than one server would run, never to a command that gave it."""
    script = tmp_path / "ok.sql"
    script.write_text("SELECT 1;\n")
    with pytest.raises(options.InputError) as exc:
        # 1 GiB free: no copy of 1 GiB of data and its WAL fits
        _checked(hosts, monkeypatch, _Copy, host="thp-always", free_gib=1,
                 variants=["current", "recommended"], duration_s=600, db="postgres",
                 instance="main", copy=True, script=str(script), design=design)
    said = str(exc.value)
    assert said.startswith(f"{servers} cop{'ies' if servers > 1 else 'y'} of 1 GiB of data")
    assert f" need{'s' if servers == 1 else ''} ~" in said
    assert "set TMPDIR to a larger disk" in said
    assert ("--design restart" in said) == (servers > 1)


def test_options_are_values_never_changed_in_place():
    """What a step of validate was given is what it saw: an Options cannot be changed, its
    sequences take no append, and a derived value is a new one with the note beside."""
    import dataclasses
    o = _opts(5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.scale = 6
    assert isinstance(o.variants, tuple) and isinstance(o.default_notes, tuple)
    with pytest.raises(AttributeError):
        o.variants.append("hugepages-1g")
    given = {"hugepages-1g": "no 1 GiB pages"}
    d = dataclasses.replace(o, dropped=given)
    given["thp-never"] = "later"  # the caller's dict is not the value's
    with pytest.raises(TypeError):
        d.dropped["thp-always"] = "in place"
    assert dict(d.dropped) == {"hugepages-1g": "no 1 GiB pages"} and not o.dropped
    n = o.noted("scale 6: why", scale=6)
    assert (n.scale, n.default_notes) == (6, ("scale 6: why",))
    assert (o.scale, o.default_notes) == (5, ())
