"""hugetlb cgroup verdicts on captured trees: a PostgreSQL cluster in a cgroup whose fault limit
(20 MiB) is below its huge pages, on a hybrid host (cgroup v2 at /sys/fs/cgroup/unified) and in
a v1 hugetlb hierarchy; the same tree edited to other limits gives the other verdicts."""

import shutil

import pytest

from hpadvise import cgroups, pipeline
from hpadvise.sysroot import SysRoot

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
