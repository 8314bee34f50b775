"""What hpadvise sees from inside a container, on trees captured on this host and edited to
the container's view: a server that has not started yet meets hpadvise's own cgroup limits (a
limit of 0 included, as the kubelet sets for a size the container did not request); inside a
cgroup namespace the limits above are out of sight, which is never read as "no limit"; a cgroup
v2 mount with memory_hugetlb_accounting charges huge pages to memory.max."""

import shutil

import pytest

from hpadvise.planning import pipeline, plan
from hpadvise.api import profiles
from hpadvise.api.engines import Demand, Instance, registry
from hpadvise.facts.host import collect
from hpadvise.facts.sysroot import SysRoot

CG = "sys/fs/cgroup/unified/hpadvise-test-8223-0"


def _planned(pages=72):
    """A server not started yet (a stopped cluster, a planned configuration)."""
    i = Instance("test", "test:/data", "/data", False)
    i.demand = Demand(i.id, None, 2048, {2048: pages, 1048576: 1}, True, "test")
    return i


def _plan(tree, insts):
    facts = collect(SysRoot(tree))
    pipeline.own_cgroups(facts, insts)
    return plan.build(facts, insts, profiles.load("oltp", registry.profile_schemas()), {})


@pytest.fixture
def in_container(hosts, tmp_path):
    """pg-cgroup-v2, with hpadvise itself in the limited cgroup."""
    tree = tmp_path / "t"
    shutil.copytree(hosts / "pg-cgroup-v2", tree, symlinks=True)
    (tree / "proc/self/cgroup").write_text("0::/hpadvise-test-8223-0\n")
    shutil.rmtree(tree / "proc/2")  # a PID namespace of its own: no kthreadd in sight
    return tree


def test_a_stopped_server_meets_hpadvise_own_limit_zero(in_container):
    (in_container / CG / "hugetlb.2MB.max").write_text("0\n")  # the kubelet's 0
    inst = _planned()
    r = _plan(in_container, [inst])
    assert inst.cgroup_from == "hpadvise"
    p = r.placements[inst.id]
    assert p.status == "held_back" and "allows 0 B" in p.reason
    [f] = [f for f in r.findings if f.code == "cgroup.hugetlb.sigbus"]
    assert f.severity == "crit" and "at its first start" in f.title
    assert "hpadvise's own cgroup, where the server will start" in f.evidence
    assert not r.pools  # nothing reserved for it


def test_a_stopped_server_under_an_adequate_own_limit_is_planned(in_container):
    (in_container / CG / "hugetlb.2MB.max").write_text(str(200 << 21) + "\n")
    inst = _planned()
    r = _plan(in_container, [inst])
    assert r.placements[inst.id].pooled
    assert not [f for f in r.findings if f.code.startswith("cgroup.")]


def test_inside_a_cgroup_namespace_no_limit_seen_is_not_no_limit(hosts, tmp_path):
    tree = tmp_path / "t"
    shutil.copytree(hosts / "pg-cgroup-v2", tree, symlinks=True)
    # the container's cgroup is the namespace's root: it has cgroup.type, no limit of its own
    (tree / "sys/fs/cgroup/unified/cgroup.type").write_text("domain\n")
    (tree / "proc/self/cgroup").write_text("0::/\n")
    inst = _planned()
    r = _plan(tree, [inst])
    assert r.host.cgroup_hidden == ("/sys/fs/cgroup/unified",)
    p = r.placements[inst.id]
    assert p.status == "held_back" and "out of sight" in p.reason
    [f] = [f for f in r.findings if f.code == "cgroup.hugetlb.unseen"]
    assert f.severity == "warn" and "hugepages-2Mi" in f.rationale
    # on the host view (no cgroup.type at the root) the same instance is planned
    r = _plan(hosts / "pg-cgroup-v2", [_planned()])
    assert r.host.cgroup_hidden == () and r.placements["test:/data"].pooled


def test_hugetlb_memory_accounting_is_read_off_the_mount(hosts, tmp_path):
    tree = tmp_path / "t"
    shutil.copytree(hosts / "pg-cgroup-v2", tree, symlinks=True)
    assert not collect(SysRoot(tree)).hugetlb_accounting
    mi = tree / "proc/self/mountinfo"
    mi.write_text(mi.read_text().replace("- cgroup2 cgroup2 rw",
                                         "- cgroup2 cgroup2 rw,memory_hugetlb_accounting"))
    assert collect(SysRoot(tree)).hugetlb_accounting
    from hpadvise.facts.cgroups import MemoryLimit
    inst = _planned()
    facts = collect(SysRoot(tree))
    inst.memory_limit = MemoryLimit(100 << 20, "/sys/fs/cgroup/unified/x/memory.max")
    r = plan.build(facts, [inst], profiles.load("oltp", registry.profile_schemas()), {})
    [f] = [f for f in r.findings if f.code == "cgroup.memory.hugetlb_charged"]
    assert "memory_hugetlb_accounting" in f.rationale and f"{72 << 21}" in f.rationale

