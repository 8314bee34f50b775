"""THP as the kernel decides it per size and per kind of mapping (thp_policy.py), on captured
trees: a per-size override found, planned and persisted; a ZGC heap (a shared memfd) read from
its own mapping and kept on THP by every shipped profile."""

import re

import pytest

from hpadvise.act import apply
from hpadvise.nextboot import boot_plan
from hpadvise.facts import host
from hpadvise.planning import pipeline, plan
from hpadvise.api import profiles
from hpadvise.api.engines import Instance, registry
from hpadvise.plugins import kv
from hpadvise.facts.sysroot import SysRoot
from hpadvise.facts.thp_rules import effective, thp_sizes
from hpadvise.kit.knob_id import KnobId

THP = "sys/kernel/mm/transparent_hugepage"


def prof(name):
    return profiles.load(name, registry.profile_schemas())


def test_fresh_host_pmd_size_follows_the_top_level(hosts):
    t = host.collect(SysRoot(hosts / "no-pools")).thp
    assert effective(t, "enabled") == {2048: "madvise", **{k: "never" for k in (
        16, 32, 64, 128, 256, 512, 1024)}}
    assert thp_sizes(t, "enabled", advised=True) == (2048,)
    assert thp_sizes(t, "enabled", advised=False) == ()
    assert thp_sizes(t, "enabled", advised=True, prctl_off=True) == ()
    assert thp_sizes(t, "shmem_enabled", advised=True) == ()  # shmem_enabled never


def test_per_size_override_found_planned_and_persisted(hosts):
    f = host.collect(SysRoot(hosts / "mthp-always"))
    assert thp_sizes(f.thp, "enabled", advised=False) == (2048,)
    redis = Instance("redis", "redis:6379", "redis", True, pid=1)
    r = plan.build(f, [redis], prof("oltp"), {"redis": kv.RedisEngine()})
    over = [x for x in r.findings if x.code == "thp.size_override"]
    assert len(over) == 1 and over[0].severity == "warn"
    assert "hugepages-2048kB/enabled = always" in over[0].evidence
    ch = [c for c in r.changes if c.kind == "thp"]
    assert [(c.knob, c.current, c.recommended) for c in ch] == [
        ("hugepages-2048kB/enabled", "always", "inherit")]
    assert boot_plan.plan_knobs(r)[KnobId.thp("enabled", 2048)] == "inherit"
    # Redis is not told that madvise suits it: the per-size knob gives it THP anyway
    codes = {x.code for x in r.findings if x.instance == "redis:6379"}
    assert codes == {"redis.thp.always"}


def test_per_size_override_is_an_apply_step(hosts):
    f = host.collect(SysRoot(hosts / "mthp-always"))
    r = plan.build(f, [], prof("oltp"), {})
    ap = apply.prepare(r, {}, restart=False, persist=False, read_only=True,
                       sys_root=str(hosts / "mthp-always"))
    steps = [(s.action.path, s.new) for s in ap.steps if s.action.kind == "sysfs_choice"]
    assert steps == [(f"{hosts}/mthp-always/{THP}/hugepages-2048kB/enabled", "inherit")]
    assert ap.steps[0].action.get() == "always" and not ap.steps[0].action.invalid("inherit")


def test_lower_sizes_keep_their_own_choice_within_the_plan(hosts, tmp_path):
    import shutil
    root = tmp_path / "t"
    shutil.copytree(hosts / "no-pools", root, symlinks=True)
    (root / THP / "hugepages-64kB/enabled").write_text("always inherit [madvise] never\n")
    (root / THP / "hugepages-16kB/enabled").write_text("[always] inherit madvise never\n")
    r = plan.build(host.collect(SysRoot(root)), [], prof("oltp"), {})
    ch = {c.knob: c.recommended for c in r.changes if c.kind == "thp"}
    assert ch == {"hugepages-16kB/enabled": "madvise"}  # 64 KiB madvise is within the plan


def _zgc(hosts, tmp_path, shmem=None, heap_pmd_kb=None):
    """The captured ZGC host, as captured or with another shmem_enabled / heap THP."""
    import shutil
    root = tmp_path / "zgc"
    shutil.copytree(hosts / "zgc-thp", root, symlinks=True)
    if shmem:
        (root / THP / "shmem_enabled").write_text(
            " ".join(f"[{w}]" if w == shmem else w for w in
                     "always within_size advise never deny force".split()) + "\n")
    if heap_pmd_kb is not None:
        for name in ("smaps", "smaps_rollup"):
            p = root / "proc/17079" / name
            p.write_text(re.sub(r"ShmemPmdMapped:\s+\d+ kB", f"ShmemPmdMapped: {heap_pmd_kb} kB",
                                p.read_text()))
        m = root / "proc/meminfo"
        m.write_text(re.sub(r"ShmemPmdMapped:\s+\d+ kB", f"ShmemPmdMapped: {heap_pmd_kb} kB",
                            m.read_text()))
    return root


def _jvm_codes(r):
    return {x.code: x for x in r.findings if x.instance == "jvm:17079"}


@pytest.mark.parametrize("profile", ["oltp", "jvm", "mixed"])
def test_zgc_on_thp_keeps_shmem_advise_under_every_profile(hosts, profile):
    r = pipeline.inspect(SysRoot(hosts / "zgc-thp"), profile)
    assert [u.pid for u in r.host.thp_users] == [17079]
    assert r.host.thp_users[0].shmem_pmd_kb == 73728
    assert not [c for c in r.changes if c.knob == "shmem_enabled"]
    assert boot_plan.plan_knobs(r)[KnobId.thp("shmem_enabled")] == "advise"
    res = [x for x in r.findings if x.code == "thp.resolved" and "shmem_enabled" in x.title]
    assert res and "pid 17079 (java)" in res[0].evidence and "ZGC" in res[0].evidence
    active = _jvm_codes(r)["jvm.thp.active"]
    assert "java_heap" in active.evidence and "ShmemPmdMapped 72 MiB" in active.evidence


def test_zgc_heap_off_thp_is_never_called_on_thp(hosts, tmp_path):
    # shmem_enabled never (what the old plan wrote): the restarted heap had 0 ShmemPmdMapped,
    # while code cache and metaspace still had AnonHugePages
    r = pipeline.inspect(SysRoot(_zgc(hosts, tmp_path, "never", 0)), "oltp")
    codes = _jvm_codes(r)
    assert "jvm.thp.active" not in codes and "jvm.thp.never" in codes
    assert "shmem_enabled" in codes["jvm.thp.never"].rationale
    # the plan gives the ZGC heap its THP back: advise
    assert [(c.current, c.recommended) for c in r.changes if c.knob == "shmem_enabled"] == [
        ("never", "advise")]


def test_zgc_heap_not_yet_on_thp_under_advise(hosts, tmp_path):
    r = pipeline.inspect(SysRoot(_zgc(hosts, tmp_path, None, 0)), "oltp")
    codes = _jvm_codes(r)
    assert "jvm.thp.active" not in codes and "jvm.thp.none" in codes
    assert "ShmemPmdMapped 0" in codes["jvm.thp.none"].evidence
