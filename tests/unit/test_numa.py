"""NUMA: per-node pool sizing, allocation and verification, on a two-node fixture tree."""

import dataclasses
import shutil

from hpadvise import apply as ap_mod
from hpadvise import host, pipeline, plan, profiles
from hpadvise.engines import Demand, Instance, registry
from hpadvise.procs import ProcTable
from hpadvise.sysroot import SysRoot


def prof():
    return profiles.load("oltp", registry.profile_schemas())


def inst(iid, pages, node=None):
    i = Instance("test", iid, iid, False)
    i.demand = Demand(iid, None, 2048, {2048: pages, 1048576: -(-pages // 512)}, True, "test",
                      False, node=node)
    return i


def test_bound_instances_get_their_pages_on_their_node(hosts):
    f = host.collect(SysRoot(hosts / "numa-2node"))
    assert f.numa_nodes == (0, 1)
    r = plan.build(f, [inst("a", 1000, node=1), inst("b", 301)], prof(), {})
    (pp,) = r.pools
    assert pp.target_pages == 1000 + 301 + 14  # headroom 1% of 1301
    per = dict(pp.per_node)
    # b (unbound) and the headroom spread as the kernel spreads a global pool: 315 -> 158/157
    assert per == {0: 158, 1: 1000 + 157}
    assert sum(per.values()) == pp.target_pages
    assert any(x.code == "pool.per_node" and "a on node 1" in x.evidence for x in r.findings)


def test_unbound_instances_keep_one_global_pool(hosts):
    f = host.collect(SysRoot(hosts / "numa-2node"))
    r = plan.build(f, [inst("a", 1000), inst("b", 301)], prof(), {})
    assert r.pools[0].per_node == ()
    one = host.collect(SysRoot(hosts / "no-pools"))
    r = plan.build(one, [inst("a", 1000, node=0)], prof(), {})
    assert r.pools[0].per_node == ()  # one node: nothing to split


def test_apply_allocates_and_verifies_per_node(hosts, tmp_path):
    root = tmp_path / "host"
    shutil.copytree(hosts / "numa-2node", root, symlinks=True)
    f = host.collect(SysRoot(root))
    r = plan.build(f, [inst("a", 600, node=0), inst("b", 40, node=1)], prof(), {})
    ap = ap_mod.prepare(r, {}, restart=False, persist=False, sys_root=str(root))
    pools = [s for s in ap.steps if s.action.kind == "pool"]
    assert [(s.action.node, s.new) for s in pools] == [(0, 600 + 4), (1, 40 + 3)]
    res = ap_mod.execute(ap, str(tmp_path / "journal"), {"argv": ["test"]})
    assert res.status == "ok", res.problems
    for node, want in ((0, 604), (1, 43)):
        p = root / f"sys/devices/system/node/node{node}/hugepages/hugepages-2048kB/nr_hugepages"
        assert int(p.read_text()) == want
    # the global file is not what was written
    assert (root / "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text().strip() == "0"


def test_per_node_pools_persist_in_node_format():
    from hpadvise.persist import BootValue, grub_cmdline
    text, left = grub_cmdline('GRUB_CMDLINE_LINUX="quiet"\n', [
        BootValue("604", size_kb=2048, node=0), BootValue("43", size_kb=2048, node=1)])
    assert 'GRUB_CMDLINE_LINUX="quiet hugepagesz=2M hugepages=0:604,1:43"' in text
    assert left == []


def test_a_process_bound_to_one_node_binds_its_demand(hosts, tmp_path):
    d = tmp_path / "proc" / "99"
    d.mkdir(parents=True)
    (d / "status").write_text("Name:\tpostgres\nMems_allowed_list:\t1\n")
    (tmp_path / "proc" / "98").mkdir()
    (tmp_path / "proc" / "98" / "status").write_text("Mems_allowed_list:\t0-1\n")
    f = host.collect(SysRoot(hosts / "numa-2node"))
    a, b = inst("a", 10), inst("b", 10)
    a.pid, b.pid = 99, 98
    pipeline.bind_nodes(f, ProcTable(SysRoot(tmp_path)), [a, b])
    assert a.demand.node == 1 and b.demand.node is None
    assert dataclasses.asdict(a.demand)["pages"] == {2048: 10, 1048576: 1}
