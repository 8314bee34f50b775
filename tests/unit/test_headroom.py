"""Pool headroom reckoned in bytes: a gigantic pool takes only whole pages of its share, the
next smaller planned size takes the rest (sizing.headrooms, plan._pools, k8s)."""

import dataclasses

from hpadvise.facts import host
from hpadvise.planning import plan
from hpadvise.api import profiles
from hpadvise.api.engines import Demand, Instance, registry
from hpadvise.kit.sizing import headrooms
from hpadvise.facts.sysroot import SysRoot

GB, MB2 = 1048576, 2048


def x86(kb):
    return kb >= GB  # the x86-64 rule HostFacts.is_gigantic falls back to


def test_a_2mib_pool_alone_rounds_up_as_before():
    assert headrooms({MB2: 4737}, 1, 0, x86) == {MB2: 48}  # ceil(47.37)
    assert headrooms({MB2: 10}, 1, 0, x86) == {MB2: 1}
    assert headrooms({MB2: 10}, 0, 0, x86) == {MB2: 0}
    assert headrooms({MB2: 10}, 0, 3, x86) == {MB2: 3}  # headroom_min_pages
    assert headrooms({MB2: 0}, 1, 3, x86) == {MB2: 0}


def test_a_1gib_pool_gets_a_page_only_where_its_share_reaches_one():
    assert headrooms({GB: 1}, 1, 0, x86) == {GB: 0}       # 10.24 MiB: no page
    assert headrooms({GB: 99}, 1, 0, x86) == {GB: 0}      # 0.99 GiB
    assert headrooms({GB: 100}, 1, 0, x86) == {GB: 1}
    assert headrooms({GB: 150}, 1, 0, x86) == {GB: 1}     # 1.5 GiB: one whole page
    assert headrooms({GB: 300}, 1, 0, x86) == {GB: 3}     # 3.0 even where the float is 2.99..
    assert headrooms({GB: 700}, 1.1, 0, x86) == {GB: 7}   # 7.7
    assert headrooms({GB: 1}, 1, 1, x86) == {GB: 1}       # the profile's minimum still holds


def test_smaller_sizes_take_what_a_gigantic_pool_leaves():
    # 1% of 1 GiB = 10.24 MiB -> 6 pages of 2 MiB, with 1% of the 2 MiB pool's 20 pages (0.2)
    assert headrooms({GB: 1, MB2: 20}, 1, 0, x86) == {GB: 0, MB2: 6}
    # 1.5 GiB share: one 1 GiB page, the half GiB left as 256 pages of 2 MiB (+ 1% of 100)
    assert headrooms({GB: 150, MB2: 100}, 1, 0, x86) == {GB: 1, MB2: 257}
    # an exact share leaves nothing to hand down
    assert headrooms({GB: 100, MB2: 100}, 1, 0, x86) == {GB: 1, MB2: 1}
    # arm64 with 4 KiB pages: 1 GiB and 32 MiB are both gigantic; the rest goes down to 2 MiB
    arm = {GB, 32768}.__contains__
    # 10.24 MiB from 1 GiB + 0.32 MiB of 32 MiB's own -> ceil(5.28 + 0.01) pages of 2 MiB
    assert headrooms({GB: 1, 32768: 1, MB2: 1}, 1, 0, arm) == {GB: 0, 32768: 0, MB2: 6}
    assert headrooms({GB: 1, 32768: 9}, 1, 0, arm) == {GB: 0, 32768: 0}


def _jvm(iid, split):
    i = Instance("test", iid, iid, False)
    i.demand = Demand(iid, None, max(split), dict(split), True, "test", False,
                      split=dict(split))
    return i


def _oltp():
    return profiles.load("oltp", registry.profile_schemas())


def test_a_1gib_heap_is_planned_one_gigantic_page(hosts):
    """A 1 GiB JVM heap on 1 GiB pages, the rest of its regions on 2 MiB: the 1 GiB pool is its
    one page, not two; the 2 MiB pool takes the 1% share the 1 GiB page could not hold."""
    h = host.collect(SysRoot(hosts / "pool-1g"))
    r = plan.build(h, [_jvm("jvm", {GB: 1, MB2: 130})], _oltp(), {})
    pools = {p.size_kb: p for p in r.pools}
    assert (pools[GB].demand_pages, pools[GB].headroom_pages, pools[GB].target_pages) == (1, 0, 1)
    # ceil(1.3 + 5.12): 1% of the 2 MiB pool plus the 10.24 MiB the gigantic pool left
    assert (pools[MB2].demand_pages, pools[MB2].headroom_pages) == (130, 7)
    why = {c.size_kb: c.reason for c in r.changes if c.kind == "pool"}
    assert pools[GB].current_pages == 1 and GB not in why  # the captured pool holds it already
    assert "7 headroom (1%)" in why[MB2]


def test_a_gigantic_pool_alone_says_why_it_has_no_headroom(hosts):
    h = host.collect(SysRoot(hosts / "no-pools"))
    i = _jvm("vm", {GB: 4})
    r = plan.build(h, [i], dataclasses.replace(_oltp(), os_floor_pct=0), {})
    assert h.is_gigantic(GB)
    (pool,) = r.pools
    assert pool.target_pages == 4
    (ch,) = [c for c in r.changes if c.kind == "pool"]
    assert ch.reason.endswith("no headroom (1% is 41.0 MiB, under one 1 GiB page)")


def test_the_change_names_the_pool_that_takes_the_share(hosts):
    h = host.collect(SysRoot(hosts / "no-pools"))
    r = plan.build(h, [_jvm("jvm", {GB: 1, MB2: 130})], _oltp(), {})
    why = {c.size_kb: c.reason for c in r.changes if c.kind == "pool"}
    assert why[GB] == ("1 for jvm + no headroom (1% is 10.2 MiB, under one 1 GiB page; "
                       "the 2 MiB pool takes it)")
    assert why[MB2] == "130 for jvm + 7 headroom (1%)"



class _Stub:
    def huge_page_settings(self, inst, kb, host):
        return {}

    def operator_manifest(self, inst, resources, settings):
        return None


def test_k8s_node_pages_follow_the_same_rule(hosts):
    """The node's pages for N pods are reckoned like the host's pools: 2 pods' 2 GiB of heap
    on 1 GiB pages take 2 pages (20.5 MiB share: none), 2 MiB pages take that share."""
    from hpadvise.outputs import k8s
    from hpadvise.facts.procs import ProcTable
    sr = SysRoot(hosts / "no-pools")
    i = _jvm("jvm", {GB: 1, MB2: 130})
    r = plan.build(host.collect(sr), [i], _oltp(), {})
    r.engines["test"] = _Stub()
    got = k8s.plan(r, ProcTable(sr), i, 2)
    # 2 x 130 = 260, + ceil(2.6 + 20.48 MiB / 2 MiB = 10.24) = 13
    assert got["node_pages"] == {GB: 2, MB2: 273}
