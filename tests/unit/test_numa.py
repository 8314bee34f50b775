"""NUMA: per-node pool sizing, allocation and verification, on trees captured in a real
two-node kernel (tests/fixtures/guests: Debian 12's 6.1 under QEMU, scripts/guest.sh)."""

import dataclasses
import shutil
from pathlib import Path

from hpadvise.act import apply as ap_mod
from hpadvise.facts import host
from hpadvise.planning import pipeline, plan
from hpadvise.api import profiles
from hpadvise.api.engines import Demand, Instance, registry
from hpadvise.facts.procs import ProcTable
from hpadvise.facts.sysroot import SysRoot
from hpadvise.kit.knob_id import KnobId

GUESTS = Path(__file__).resolve().parent.parent / "fixtures" / "guests"
TWO = GUESTS / "amd64-2node-membind"


def prof():
    return profiles.load("oltp", registry.profile_schemas())


def inst(iid, pages, node=None):
    i = Instance("test", iid, iid, False)
    i.demand = Demand(iid, None, 2048, {2048: pages, 1048576: -(-pages // 512)}, True, "test",
                      False, node=node)
    return i


def test_bound_instances_get_their_pages_on_their_node(hosts):
    f = host.collect(SysRoot(str(TWO)))
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
    f = host.collect(SysRoot(str(TWO)))
    r = plan.build(f, [inst("a", 1000), inst("b", 301)], prof(), {})
    assert r.pools[0].per_node == ()
    one = host.collect(SysRoot(hosts / "no-pools"))
    r = plan.build(one, [inst("a", 1000, node=0)], prof(), {})
    assert r.pools[0].per_node == ()  # one node: nothing to split


def test_apply_allocates_and_verifies_per_node(hosts, tmp_path):
    root = tmp_path / "host"
    shutil.copytree(TWO, root, symlinks=True)
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
    from hpadvise.act.persist import BootValue, grub_cmdline
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
    f = host.collect(SysRoot(str(TWO)))
    a, b = inst("a", 10), inst("b", 10)
    a.pid, b.pid = 99, 98
    pipeline.bind_nodes(f, ProcTable(SysRoot(tmp_path)), [a, b])
    assert a.demand.node == 1 and b.demand.node is None
    assert dataclasses.asdict(a.demand)["pages"] == {2048: 10, 1048576: 1}


def _node_tree(root, node_pages: dict[int, tuple[int, int]]):
    """A sysfs tree with one 2 MiB pool per node: {node: (nr, free)}."""
    for n, (nr, free) in node_pages.items():
        d = root / f"sys/devices/system/node/node{n}/hugepages/hugepages-2048kB"
        d.mkdir(parents=True)
        for k, v in (("nr", nr), ("free", free), ("surplus", 0)):
            (d / f"{k}_hugepages").write_text(f"{v}\n")


class _E:
    def __init__(self, old):
        self.old = old


def test_rollback_lowers_a_node_holding_pages_in_use_last(tmp_path):
    """Writing one node while another holds surplus pages makes some kernels allocate fresh
    persistent pages on the node written (node_pools.py): the node whose pages are still in
    use is put back after the others."""
    from hpadvise.changes.actions import Pool
    from hpadvise.changes.node_pools import restore_order
    _node_tree(tmp_path, {0: (2, 2), 1: (277, 0)})
    n0, n1 = Pool(2048, node=0, root=str(tmp_path)), Pool(2048, node=1, root=str(tmp_path))
    other = Pool(1048576, root=str(tmp_path))
    items = [(_E(0), n1), (_E(0), n0), (_E(0), other)]
    ordered, first = restore_order(items)
    assert [a for _, a in ordered] == [n0, other, n1]
    assert first == []


def test_rollback_empties_a_size_in_one_global_write_when_two_nodes_hold_pages(tmp_path):
    from hpadvise.changes.actions import Pool
    from hpadvise.changes.node_pools import restore_order
    _node_tree(tmp_path, {0: (100, 10), 1: (277, 0)})
    items = [(_E(0), Pool(2048, node=n, root=str(tmp_path))) for n in (1, 0)]
    ordered, first = restore_order(items)
    assert [(p.size_kb, p.node) for p in first] == [(2048, None)]
    # a node going back to a count that is not 0 keeps per-node writes only
    items = [(_E(0), Pool(2048, node=1, root=str(tmp_path))),
             (_E(50), Pool(2048, node=0, root=str(tmp_path)))]
    assert restore_order(items)[1] == []


def test_check_predicts_the_bound_start_that_finds_its_node_short(hosts, tmp_path):
    """Node 0 holds the whole pool, node 1 none: an instance bound to node 1 cannot reserve
    its pages there (mm/hugetlb.c allowed_mems_nr), though the pool is large enough in all."""
    root = tmp_path / "host"
    shutil.copytree(TWO, root, symlinks=True)
    nd = root / "sys/devices/system/node"
    for n, nr in ((0, 400), (1, 0)):
        for k in ("nr", "free"):
            (nd / f"node{n}/hugepages/hugepages-2048kB/{k}_hugepages").write_text(f"{nr}\n")
    g = root / "sys/kernel/mm/hugepages/hugepages-2048kB"
    for k in ("nr", "free"):
        (g / f"{k}_hugepages").write_text("400\n")
    f = host.collect(SysRoot(root))
    a = inst("a", 277, node=1)
    a.numa_binding = "memory policy bind:1"
    r = plan.build(f, [a], prof(), {})
    (short,) = [x for x in r.findings if x.code == "pool.node_short"]
    assert short.severity == "crit" and short.instance == "a"
    assert "needs 277 2 MiB pages on node 1; node 1 has 0 free" in short.evidence
    assert "400 in all (enough, on the other nodes)" in short.evidence
    per = dict(r.pools[0].per_node)
    assert per[1] >= 277  # the plan puts them where it needs them
    # the same instance unbound: nothing to predict
    r = plan.build(f, [inst("a", 277)], prof(), {})
    assert not any(x.code == "pool.node_short" for x in r.findings)


def _guest_report(name):
    return pipeline.inspect(SysRoot(str(GUESTS / name)), engine_names=["postgres"])


def test_captured_guest_bound_by_numactl_membind():
    """Captured in the two-node guest (Debian 12's 6.1 under QEMU): PostgreSQL 15 started by
    `numactl --membind=1`: its cpuset allows both nodes, its memory policy binds it to 1."""
    r = _guest_report("amd64-2node-membind")
    assert r.host.numa_nodes == (0, 1)
    i = next(i for i in r.instances if i.id == "postgres:5440")
    assert i.numa_binding == "memory policy bind:1" and i.demand.node == 1
    per = dict(r.pools[0].per_node)
    assert per[1] >= i.demand.pages[2048] > per[0]


def test_captured_guest_bound_by_a_cpuset():
    r = _guest_report("amd64-2node-cpuset")
    i = next(i for i in r.instances if i.id == "postgres:5440")
    assert i.numa_binding == "cpuset.mems 1" and i.demand.node == 1


def test_memory_policies_as_numa_maps_shows_them():
    from hpadvise.facts.numa import Policy, parse_policy, task_policy
    text = next((GUESTS / "amd64-2node-membind" / "proc").glob("*/numa_maps")).read_text()
    first = text.splitlines()[0]
    assert parse_policy(first) == Policy("bind", (1,))
    # mm/mempolicy.c mpol_to_str(): MODE[=static|=relative][:NODELIST]
    assert parse_policy("7f00 interleave=static:0-2,5 anon=1") == Policy("interleave",
                                                                         (0, 1, 2, 5), "static")
    assert parse_policy("7f00 prefer (many):1 anon=1") == Policy("prefer (many)", (1,))
    assert parse_policy("7f00 default anon=1").default
    assert parse_policy("garbage") is None
    assert Policy("bind", (1,)).numactl() == ["--membind=1"]
    # unreadable numa_maps (another user's process, no NUMA): no policy, not "default"
    assert task_policy(SysRoot(str(GUESTS / "amd64-2node-membind")), 999999) is None


def test_rollback_counts_reserved_pages_as_kept(tmp_path):
    """Reservations are counted for the whole pool: a node whose pages are reserved but not yet
    touched keeps them as surplus when lowered, so it goes last too."""
    from hpadvise.changes.actions import Pool
    from hpadvise.changes.node_pools import restore_order
    _node_tree(tmp_path, {0: (2, 2), 1: (280, 280)})
    g = tmp_path / "sys/kernel/mm/hugepages/hugepages-2048kB"
    g.mkdir(parents=True)
    (g / "resv_hugepages").write_text("0\n")
    n0, n1 = Pool(2048, node=0, root=str(tmp_path)), Pool(2048, node=1, root=str(tmp_path))
    # nothing reserved, nothing in use: apply's order stays
    assert [a for _, a in restore_order([(_E(0), n1), (_E(0), n0)])[0]] == [n1, n0]
    (g / "resv_hugepages").write_text("262\n")
    ordered, first = restore_order([(_E(0), n1), (_E(0), n0)])
    # either node may hold the reservations: both would keep pages, so one global write
    assert [(p.size_kb, p.node) for p in first] == [(2048, None)]
    # node 0 at its old count already: only node 1 keeps pages, and it goes last
    ordered, first = restore_order([(_E(0), n1), (_E(2), n0)])
    assert [a for _, a in ordered] == [n0, n1] and first == []


def test_rollback_reports_and_reads_back_each_node_after_one_global_write(tmp_path):
    """Apply made per-node pools; rollback empties them with one global write (the size has
    reservations, so either node may keep pages) and still names and reads back each node.
    A copied tree does not do the kernel's books: its per-node files stay as they were after
    the global write, and rollback writes them itself."""
    from hpadvise.ledger import journal as jr
    root = tmp_path / "host"
    shutil.copytree(TWO, root, symlinks=True)
    f = host.collect(SysRoot(str(root)))
    r = plan.build(f, [inst("a", 600, node=0), inst("b", 40, node=1)], prof(), {})
    ap = ap_mod.prepare(r, {}, restart=False, persist=False, sys_root=str(root))
    res = ap_mod.execute(ap, str(tmp_path / "journal"), {"argv": ["test"]})
    assert res.status == "ok", res.problems
    g = root / "sys/kernel/mm/hugepages/hugepages-2048kB"
    (g / "resv_hugepages").write_text("100\n")
    said: list[str] = []
    done, errors = jr.rollback(jr.find(str(tmp_path / "journal"), None), said.append)
    assert not errors
    assert said[0] == "pool 2 MiB ..."  # the global write first
    assert (g / "nr_hugepages").read_text().strip() == "0"
    assert [d for d in done if d.startswith("pool")] == ["pool 2 MiB node 1: 43 -> 0",
                                                         "pool 2 MiB node 0: 604 -> 0"]
    for n in (0, 1):
        p = root / f"sys/devices/system/node/node{n}/hugepages/hugepages-2048kB/nr_hugepages"
        assert p.read_text().strip() == "0"


def test_a_restart_starts_its_process_with_the_servers_memory_policy():
    """keeper() gives the process it starts the policy the server had (set_mempolicy), as
    numa_maps then shows it; with nothing to keep there is no preexec function at all."""
    import subprocess

    from hpadvise.facts.numa import Keep, Policy, keeper, parse_policy
    if not (Path("/proc/self/numa_maps").exists()):
        import pytest
        pytest.skip("this kernel has no NUMA support (/proc/self/numa_maps is missing)")
    run = keeper(Keep(None, Policy("bind", (0,))))
    out = subprocess.run(["cat", "/proc/self/numa_maps"], capture_output=True, text=True,
                         preexec_fn=run, check=True).stdout
    assert {str(parse_policy(ln)) for ln in out.splitlines()} == {"bind:0"}
    assert keeper(Keep(None, None)) is None
    assert Keep("/sys/fs/cgroup/x", Policy("bind", (1,))).shell("pg_ctl start") == (
        "sh -c 'echo $$ > /sys/fs/cgroup/x/cgroup.procs && exec \"$@\"' sh "
        "numactl --membind=1 pg_ctl start")


def test_the_next_boot_counts_a_pool_written_node_by_node(tmp_path):
    """apply persists per-node pools in its boot unit, node by node (as the two-node guest's
    apply wrote them); the next boot's pool is their sum, not "nothing sets it"."""
    from hpadvise.facts import boot
    from hpadvise.facts.sysroot import SysRoot
    unit = tmp_path / "etc/systemd/system/hpadvise-hugepages.service"
    unit.parent.mkdir(parents=True)
    unit.write_text(
        "[Service]\nType=oneshot\n"
        "ExecStart=/bin/sh -c 'echo 2 > /sys/devices/system/node/node0/hugepages/"
        "hugepages-2048kB/nr_hugepages'\n"
        "ExecStart=/bin/sh -c 'echo 275 > /sys/devices/system/node/node1/hugepages/"
        "hugepages-2048kB/nr_hugepages'\n")
    wants = tmp_path / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir()
    (wants / "hpadvise-hugepages.service").symlink_to(unit)
    (tmp_path / "run/systemd/system").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cmdline").write_text("root=/dev/vda\n")
    b = boot.read(SysRoot(str(tmp_path)), 2048)
    s = b.at_boot(KnobId.pool(2048))
    assert (s.value, s.source) == ("277", "/etc/systemd/system/hpadvise-hugepages.service:3")
