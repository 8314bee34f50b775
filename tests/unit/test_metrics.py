"""`check --format prometheus` on captured hosts, read back with prometheus_client's own parser
(the one Prometheus-compatible scrapers use in Python)."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import run_cli


def _families(root, *extra):
    r = run_cli("check", "--format", "prometheus", "--root", str(root), *extra)
    assert r.returncode == 0, r.stderr
    fams = {f.name: f for f in text_string_to_metric_families(r.stdout)}
    for f in fams.values():  # one HELP and TYPE per family
        assert f.documentation and f.type == "gauge", f.name
    return fams, r.stdout


def _samples(fams, name, **labels):
    return [s for s in fams[name].samples
            if all(s.labels.get(k) == str(v) for k, v in labels.items())]


def test_silent_fallback_is_visible_as_metrics(hosts):
    fams, text = _families(hosts / "pg-fallback")
    [info] = fams["hpadvise_build_info"].samples
    assert info.value == 1 and info.labels["version"]
    for f in fams.values():  # the scrape's own labels are never ours
        assert not [s for s in f.samples if {"instance", "job"} & set(s.labels)], f.name
    [ok] = fams["hpadvise_check_success"].samples
    assert ok.value == 1
    assert fams["hpadvise_check_duration_seconds"].samples[0].value > 0
    on = _samples(fams, "hpadvise_instance_on_huge_pages", engine="postgres")
    assert on and all(s.value == 0 for s in on)  # fell back to 4 KiB pages
    fallback = _samples(fams, "hpadvise_finding", code="pg.huge_pages.fallback")
    assert fallback and fallback[0].labels["severity"] == "crit"
    crit = _samples(fams, "hpadvise_findings", severity="crit")[0].value
    assert crit == len([s for s in fams["hpadvise_finding"].samples
                        if s.labels["severity"] == "crit"])
    assert _samples(fams, "hpadvise_instance_pages_needed", engine="postgres")[0].value > 0


def test_pools_per_size_and_node_and_thp_mode(hosts):
    fams, _ = _families(hosts / "pool-2m")
    total = _samples(fams, "hpadvise_pool_pages", page_size_bytes=2 << 20)
    assert [s.value for s in total] == [64]
    assert _samples(fams, "hpadvise_pool_node_free_pages", page_size_bytes=2 << 20, node="0")
    # sum() over the pool family is the pool: no node or state rows mixed in
    assert sum(s.value for s in fams["hpadvise_pool_pages"].samples
               if s.labels["page_size_bytes"] == str(2 << 20)) == 64
    active = [s.labels["mode"] for s in _samples(fams, "hpadvise_thp_mode", knob="enabled")
              if s.value == 1]
    assert len(active) == 1
    # each THP size's own knob, one active mode each, as the captured sysfs has it
    sizes = _samples(fams, "hpadvise_thp_size_mode", knob="enabled")
    on = {s.labels["thp_size_bytes"]: s.labels["mode"] for s in sizes if s.value == 1}
    assert on[str(2 << 20)] == "inherit" and on[str(64 << 10)] == "never"
    assert len(sizes) == 4 * len(on) and str(8 << 10) not in on  # 8 KiB: shmem_enabled only
    shm = _samples(fams, "hpadvise_thp_size_mode", knob="shmem_enabled")
    assert {s.labels["mode"] for s in shm} == {"always", "inherit", "within_size", "advise",
                                               "never"}


def test_on_huge_pages_and_atomic_output_file(hosts, tmp_path):
    out = tmp_path / "hpadvise.prom"
    out.write_text("old\n")
    r = run_cli("check", "--format", "prometheus", "--root", str(hosts / "pg-hugetlb"),
                "--output", str(out))
    assert r.returncode == 0 and r.stdout == ""
    fams = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    on = {s.labels["db_instance"]: s.value for s in fams["hpadvise_instance_on_huge_pages"].samples
          if s.labels["engine"] == "postgres"}
    assert on.pop("postgres:5432") == 0  # the system's server in the base tree
    assert list(on.values()) == [1]  # the captured cluster with huge_pages = on
    assert [p.name for p in tmp_path.iterdir()] == ["hpadvise.prom"]  # no temp file left


@pytest.mark.parametrize("args,needle", [
    (["--format", "yaml"], "--format"),
    (["--json", "--format", "prometheus"], "contradict"),
    (["--output", "/nonexistent/dir/x.prom"], "--output"),
])
def test_format_errors(hosts, args, needle):
    r = run_cli("check", "--root", str(hosts / "no-pools"), *args)
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_no_fallback_alarm_for_what_thp_serves(hosts):
    """A Redis is served by THP, never by the static pools: no on_huge_pages sample of 0 for
    it (an alert on 0 would fire for every Redis), while PostgreSQL, planned on static pages,
    keeps its sample."""
    import time

    from hpadvise.api import profiles
    from hpadvise.api.engines import Instance, registry
    from hpadvise.facts import host
    from hpadvise.facts.sysroot import SysRoot
    from hpadvise.outputs.metrics import to_prometheus
    from hpadvise.planning import pipeline, plan
    r0 = pipeline.inspect(SysRoot(hosts / "pg-fallback"))
    redis = Instance("redis", "redis:6379", "redis", True, pid=1, backing="4k")
    insts = [*r0.instances, redis]
    r = plan.build(host.collect(SysRoot(hosts / "pg-fallback")), insts,
                   profiles.load("oltp", registry.profile_schemas()),
                   {**r0.engines, "redis": registry.get("redis")})
    assert r.placements["redis:6379"].status == "thp"
    fams = {f.name: f for f in text_string_to_metric_families(to_prometheus(r, 0.1, time.time()))}
    ids = {s.labels["db_instance"] for s in fams["hpadvise_instance_on_huge_pages"].samples}
    assert "redis:6379" not in ids and any(i.startswith("postgres:") for i in ids)


def test_each_kernel_setting_in_a_family_of_its_own(tmp_path):
    """vm.zone_reclaim_mode (reclaim bits) and vm.hugetlb_shm_group (a group id) are not one
    kind of number: each has its own family, with its meaning in the help, and no family is
    keyed by a setting's name."""
    import shutil
    from pathlib import Path

    from hpadvise.facts.sysctls import PLANNED
    guest = tmp_path / "guest"  # two nodes, zone_reclaim_mode on (captured before it was read)
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "guests" /
                    "amd64-2node-membind", guest, symlinks=True)
    (guest / "proc/sys/vm/zone_reclaim_mode").write_text("1\n")
    fams, text = _families(guest)
    for s in PLANNED:
        f = fams[s.metric]
        assert s.name in f.documentation and s.meaning in f.documentation, f.documentation
        [now] = f.samples
        assert now.labels == {} and now.value == int((guest / s.path[1:]).read_text())
        assert f"{s.metric}_recommended" in fams
    [off] = fams["hpadvise_sysctl_vm_zone_reclaim_mode_recommended"].samples
    assert off.value == 0  # the plan turns it off on two nodes
    assert not [f for f in fams.values() for x in f.samples if "name" in x.labels]
    assert "hpadvise_sysctl{" not in text
