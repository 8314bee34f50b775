"""The recommendation engine on captured hosts with instances of known demand."""

import dataclasses

import pytest

from hpadvise.facts import host
from hpadvise.planning import plan
from hpadvise.api import profiles
from hpadvise.api.engines import Demand, Instance, registry
from hpadvise.facts.sysroot import SysRoot


def facts(hosts, state):
    return host.collect(SysRoot(hosts / state))


def prof(**over):
    p = profiles.load("oltp", registry.profile_schemas())
    return dataclasses.replace(p, **over)


def inst(iid, pages_2m, pages_1g=None, running=False, held=0, selectable=True):
    pages = {2048: pages_2m}
    if pages_1g is not None:
        pages[1048576] = pages_1g
    i = Instance("test", iid, iid, running)
    i.demand = Demand(iid, None, 2048, pages, True, "test", selectable, held_pages=held)
    if held:
        i.backing, i.backing_page_kb = "hugetlb", 2048
    return i


def test_pool_is_sum_plus_headroom(hosts):
    r = plan.build(facts(hosts, "no-pools"), [inst("a", 4200), inst("b", 537)], prof(), {})
    (pool,) = r.pools
    assert pool.demand_pages == 4737
    assert pool.headroom_pages == 48  # ceil(1% of 4737)
    assert pool.target_pages == 4785
    ch = [c for c in r.changes if c.kind == "pool"]
    assert ch[0].current == 0 and ch[0].recommended == 4785
    assert not r.blocked


def test_thp_changes_follow_profile(hosts):
    r = plan.build(facts(hosts, "thp-always"), [], prof(), {})
    got = {c.target.split("/")[1]: (c.current, c.recommended) for c in r.changes if c.kind == "thp"}
    assert got == {"enabled": ("always", "madvise"), "defrag": ("always", "madvise"),
                   "shmem_enabled": ("always", "never")}
    assert {f.code for f in r.findings} >= {"thp.enabled", "thp.shmem_enabled"}
    assert all(f.severity == "warn" for f in r.findings if f.code.startswith("thp."))
    r = plan.build(facts(hosts, "no-pools"), [], prof(), {})
    assert not [c for c in r.changes if c.kind == "thp"]


def test_os_floor_blocks_the_plan(hosts):
    h = facts(hosts, "no-pools")  # ~23.5 GiB: floor is 20% = 4.7 GiB
    r = plan.build(h, [inst("big", 10000)], prof(), {})  # ~19.7 GiB
    assert r.blocked and "floor" in r.blocked[0]
    assert any(f.code == "pool.os_floor" and f.severity == "crit" for f in r.findings)
    r = plan.build(h, [inst("ok", 8000)], prof(), {})  # ~15.8 GiB
    assert not r.blocked


@pytest.mark.parametrize("pages_2m,pages_1g,gigantic,expect", [
    (20000, 40, "auto", 1048576),   # 39.1 GiB -> 40 GiB: 2.4% waste, above 32 GiB
    (4200, 9, "auto", 2048),        # 8.2 GiB: below gigantic_min
    (4200, 9, "prefer", 2048),      # 9.7% waste is too much even when preferred
    (4590, 9, "prefer", 1048576),   # 8.96 GiB -> 9 GiB: 0.4% waste
    (20000, 40, "never", 2048),
])
def test_gigantic_choice(hosts, pages_2m, pages_1g, gigantic, expect):
    h = facts(hosts, "no-pools")
    i = inst("x", pages_2m, pages_1g)
    assert plan.choose_page_kb(i, h, prof(gigantic=gigantic)) == expect


def test_gigantic_needs_a_selectable_engine(hosts):
    i = inst("x", 20000, 40, selectable=False)
    assert plan.choose_page_kb(i, facts(hosts, "no-pools"), prof()) == 2048


def test_running_instance_pages_are_not_counted_twice(hosts):
    # pg-hugetlb: a pool of 72, all held by a running instance (64 reserved, 8 faulted)
    h = facts(hosts, "pg-hugetlb")
    r = plan.build(h, [inst("pg", 72, running=True, held=72)], prof(headroom_pct=0), {})
    (pool,) = r.pools
    assert pool.foreign_pages == 0 and pool.target_pages == 72
    assert not [c for c in r.changes if c.kind == "pool"]
    assert not [f for f in r.findings if f.code == "pool.unused"]


def test_pages_held_by_others_are_kept(hosts):
    h = facts(hosts, "pg-hugetlb")  # 72 pages held by a process the plan does not know
    r = plan.build(h, [inst("new", 100)], prof(headroom_pct=0), {})
    assert r.pools[0].foreign_pages == 72 and r.pools[0].target_pages == 172


def test_unused_pool_is_reported(hosts):
    r = plan.build(facts(hosts, "pool-2m"), [], prof(), {})
    f = [f for f in r.findings if f.code == "pool.unused"]
    assert f and f[0].severity == "warn" and "64 reserved 2 MiB pages" in f[0].title


def test_commit_limit_warning_under_strict_overcommit(hosts):
    h = facts(hosts, "no-pools")
    h = dataclasses.replace(h, sysctls={**h.sysctls, "vm.overcommit_memory": 2},
                            mem=dataclasses.replace(h.mem, committed_as_kb=8 << 20))
    # (23.5 GiB - 12 GiB pool) * 50% = ~5.7 GiB < 8 GiB committed
    r = plan.build(h, [inst("a", 6144)], prof(), {})
    assert any(f.code == "commit.limit" for f in r.findings)
    r = plan.build(h, [inst("a", 100)], prof(), {})
    assert not any(f.code == "commit.limit" for f in r.findings)


def test_fragmented_memory_warns(hosts):
    h = facts(hosts, "no-pools")
    can = h.runtime_allocatable_pages(2048)
    r = plan.build(h, [inst("a", can + 50)], prof(headroom_pct=0), {})
    assert any(f.code == "pool.fragmented" for f in r.findings)
    r = plan.build(h, [inst("a", can - 50)], prof(headroom_pct=0), {})
    assert not any(f.code == "pool.fragmented" for f in r.findings)


def test_free_memory_not_listed_yet_is_no_fragmentation(hosts):
    """A freshly booted host whose kernel initialises memory lazily (deferred_init=lazy):
    125 GiB free, 1567 free 2 MiB blocks in buddyinfo. The 12,729 pages 24 GB of buffers need
    fit (the pool grew at once there): no false warning. The same plan where every free page
    is listed, and few are contiguous, is still warned about."""
    from hpadvise.api.engines import Demand, Instance
    prof = profiles.load("oltp", registry.profile_schemas())

    def plan_for(state, pages):
        i = Instance("test", "t:1", "t", False)
        i.demand = Demand("t:1", None, 2048, {2048: pages}, True, "test")
        return plan.build(host.collect(SysRoot(hosts / state)), [i], prof, {})

    lazy = host.collect(SysRoot(hosts / "lazy-126g"))
    assert lazy.unlisted_free_bytes > 100 << 30
    assert lazy.runtime_allocatable_pages(2048) > 12729
    r = plan_for("lazy-126g", 12602)
    assert not [f for f in r.findings if f.code == "pool.fragmented"]
    assert {p.feasibility for p in r.pools} == {"fits"}
    r = plan_for("fragmented", 2000)
    [f] = [f for f in r.findings if f.code == "pool.fragmented"]
    assert "not listed" not in f.evidence and r.pools[0].feasibility == "boot_reservation"
    # the captured VM itself, freshly started, initialised lazily too: 19 GiB not listed
    r = plan_for("no-pools", 2000)
    assert not [f for f in r.findings if f.code == "pool.fragmented"]
