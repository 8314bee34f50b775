"""hugetlb cgroup verdicts on captured trees: a PostgreSQL cluster in a cgroup whose fault limit
(20 MiB) is below its huge pages, on a hybrid host (cgroup v2 at /sys/fs/cgroup/unified) and in
a v1 hugetlb hierarchy; the same tree edited to other limits gives the other verdicts."""

import shutil

import pytest

from hpadvise.facts import cgroups
from hpadvise.planning import pipeline
from hpadvise.facts.sysroot import SysRoot

MiB = 1 << 20


def _pg(tree):
    r = pipeline.inspect(SysRoot(tree), engine_names=["postgres"])
    [inst] = [i for i in r.instances if i.cgroup]
    return r, inst


def _codes(r, inst):
    return {f.code: f for f in r.findings if f.instance == inst.id}


@pytest.mark.parametrize("state,version", [("pg-cgroup-v2", 2), ("pg-cgroup-v1", 1)])
def test_fault_limit_below_the_need_is_a_sigbus_and_no_huge_pages(hosts, state, version):
    r, inst = _pg(hosts / state)
    [lim] = inst.cgroup
    assert (lim.version, lim.size, lim.limit_bytes, lim.rsvd_limit_bytes) == \
        (version, "2MB", 20 * MiB, None)
    assert inst.backing == "hugetlb"  # started on huge pages: the mapping was not capped
    f = _codes(r, inst)["cgroup.hugetlb.sigbus"]
    need = inst.demand.pages[2048] * 2 * MiB
    assert f.severity == "crit" and f"needs {need} bytes" in f.evidence
    assert lim.file("max") in f.evidence and lim.cgroup in f.title
    assert [(c.target, c.recommended) for c in r.changes if c.instance == inst.id] == \
        [("huge_pages", "off")]
    assert not [p for p in r.pools if inst.id in p.instances]


def _edit(hosts, tmp_path, **files):
    tree = tmp_path / "t"
    shutil.copytree(hosts / "pg-cgroup-v2", tree)
    _, inst = _pg(tree)
    d = tree / inst.cgroup[0].file("max").lstrip("/").rsplit("/", 1)[0]
    for name, text in files.items():
        (d / name.replace("_", ".")).write_text(text + "\n")
    return _pg(tree)


def test_reservation_limit_below_the_need_is_a_clean_failure(hosts, tmp_path):
    r, inst = _edit(hosts, tmp_path, hugetlb_2MB_rsvd_max=str(20 * MiB))
    codes = _codes(r, inst)
    assert "cgroup.hugetlb.reserve_short" in codes and "cgroup.hugetlb.sigbus" not in codes


def test_adequate_limits_fit_and_a_past_hit_is_reported(hosts, tmp_path):
    r, inst = _edit(hosts, tmp_path, hugetlb_2MB_max=str(400 * MiB),
                    hugetlb_2MB_rsvd_max=str(400 * MiB))
    assert not [c for c in _codes(r, inst) if c.startswith("cgroup.")]
    assert ("huge_pages", "on") in {(c.target, c.recommended) for c in r.changes}
    r, inst = _edit(hosts, tmp_path / "x", hugetlb_2MB_max=str(400 * MiB),
                    hugetlb_2MB_events="max 2")
    assert list(c for c in _codes(r, inst) if c.startswith("cgroup.")) == ["cgroup.hugetlb.hit"]


def test_verdict_takes_the_worst_limit_for_the_size():
    def lim(size, fault, rsvd, events=0):
        return cgroups.HugetlbLimit(2, "/a", size, fault, "/a", rsvd, "/a", 0, 0, events,
                                    "/sys/fs/cgroup")
    assert cgroups.verdict((lim("1GB", 1, 1),), 2048, 10) is None  # another size
    assert cgroups.verdict((lim("2MB", None, None),), 2048, 10).kind == "fits"
    v = cgroups.verdict((lim("2MB", 20 * MiB, None), lim("2MB", None, 30 * MiB)), 2048, 11)
    assert (v.kind, v.need_bytes) == ("sigbus", 22 * MiB)
    # a refused reservation fails the mapping before any fault could
    v = cgroups.verdict((lim("2MB", 20 * MiB, None), lim("2MB", None, 10 * MiB)), 2048, 11)
    assert v.kind == "reserve_short"
    assert cgroups.verdict((lim("2MB", None, 22 * MiB),), 2048, 11).kind == "fits"
    assert cgroups.size_name(1048576) == "1GB" and cgroups.size_name(2048) == "2MB"


def test_memory_limit_below_the_buffers_is_reported_when_huge_pages_go_off(hosts, tmp_path):
    r, inst = _edit(hosts, tmp_path, memory_max=str(64 * MiB))
    assert inst.memory_limit.limit_bytes == 64 * MiB
    assert inst.memory_limit.file.endswith(f"{inst.cgroup[0].cgroup}/memory.max")
    codes = _codes(r, inst)
    assert "cgroup.hugetlb.sigbus" in codes
    f = codes["cgroup.memory.short"]
    assert f"memory.max = {64 * MiB}" in f.evidence
    # with room for the buffers there is nothing to say about memory
    r, inst = _edit(hosts, tmp_path / "x", memory_max=str(1 << 30))
    assert "cgroup.memory.short" not in _codes(r, inst)


@pytest.mark.parametrize("path,want", [
    ("/kubepods/burstable/pod1234abcd-11/0123456789abcdef0123",
     "Kubernetes pod 1234abcd-11 (burstable), container 0123456789ab"),
    ("/kubepods/pod99", "Kubernetes pod 99 (guaranteed)"),
    ("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12ab_34cd.slice/"
     "cri-containerd-0123456789abcdef0123456789abcdef.scope",
     "Kubernetes pod 12ab-34cd (besteffort), container 0123456789ab (containerd)"),
    ("/kubepods.slice/kubepods-pod12ab_34cd.slice/crio-0123456789abcdef0123.scope",
     "Kubernetes pod 12ab-34cd (guaranteed), container 0123456789ab (CRI-O)"),
    ("/system.slice/docker-0123456789abcdef0123.scope", "Docker container 0123456789ab"),
    ("/machine.slice/libpod-0123456789abcdef0123.scope", "Podman container 0123456789ab"),
    ("/system.slice/postgresql@15-main.service", "service postgresql@15-main.service"),
    ("/user.slice/user-0.slice", None),
])
def test_cgroup_paths_name_their_workload(path, want):
    assert cgroups.workload(path) == want


def test_the_pod_level_limit_is_named_as_the_pods(hosts, tmp_path):
    """The same limit as in pg-cgroup-v2, moved to a pod-shaped tree: the limit set on the
    pod, the server in a container below it with none of its own."""
    import shutil
    tree = tmp_path / "t"
    shutil.copytree(hosts / "pg-cgroup-v2", tree, symlinks=True)
    unified = tree / "sys/fs/cgroup/unified"
    pod = "kubepods/burstable/pod0a1b2c3d-4e5f"
    (unified / pod).mkdir(parents=True)
    (unified / "hpadvise-test-8223-0").rename(unified / pod / "0123456789abcdef0123")
    for f in (unified / pod / "0123456789abcdef0123").glob("hugetlb.*.max"):
        (unified / pod / f.name).write_text(f.read_text())  # the limit on the pod ...
        f.write_text("max\n")  # ... and none on the container
    cg = tree / "proc/8241/cgroup"
    cg.write_text(cg.read_text().replace("0::/hpadvise-test-8223-0",
                                         f"0::/{pod}/0123456789abcdef0123"))
    r, inst = _pg(tree)
    f = _codes(r, inst)["cgroup.hugetlb.sigbus"]
    assert f"cgroup /{pod} (the pod's limit: Kubernetes pod 0a1b2c3d-4e5f (burstable))" \
        in f.title
    assert "container 0123456789ab" in f.evidence
