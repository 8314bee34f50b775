"""HostFacts from host trees captured on a real machine (tests/fixtures/capture.py)."""

import os
import shutil
import subprocess

import pytest

from hpadvise.facts import host
from hpadvise.facts.sysroot import SysRoot
from hpadvise.facts.thp_rules import parse_knob


def facts(root):
    return host.collect(SysRoot(root))


def test_no_pools(hosts):
    h = facts(hosts / "no-pools")
    assert h.mem.total_kb > 20 * 1024 * 1024
    assert h.base_page_bytes == 4096
    assert h.default_hugepage_kb == 2048
    assert h.page_sizes_kb == (2048, 1048576)
    assert all(p.nr_pages == 0 for p in h.pools)
    assert h.numa_nodes == (0,)
    assert h.pool(2048).nodes[0].nr_pages == 0
    assert h.thp.enabled.value == "madvise"
    assert h.thp.enabled.choices == ("always", "madvise", "never")
    assert h.thp.shmem_enabled.value == "never"
    assert h.thp.khugepaged["max_ptes_none"] == 511
    assert h.thp.pmd_size_kb == 2048
    # mTHP: the 8 kB size has shmem_enabled but no enabled file (docs/reference.md)
    assert h.thp.mthp[8]["enabled"] is None and h.thp.mthp[8]["shmem_enabled"] == "never"
    assert {"pdpe1gb", "pse"} <= h.cpu_flags and h.supports_1g
    assert h.virtualization
    assert h.sysctls["vm.overcommit_memory"] == 0 and h.sysctls["kernel.shmmax"] > 0
    assert h.memlock_soft is not None
    assert h.hugetlbfs_mounts == ()
    assert h.buddy and h.buddy[0].zone == "DMA"
    assert h.runtime_allocatable_pages(2048) > 100
    assert h.runtime_allocatable_pages(1048576) is None  # above MAX_ORDER: not from buddy lists
    assert any(k.startswith("thp_") for k in h.vmstat) and "compact_stall" in h.vmstat
    assert h.notes == ()


def test_2m_pool(hosts):
    h = facts(hosts / "pool-2m")
    p = h.pool(2048)
    assert (p.nr_pages, p.free_pages, p.resv_pages, p.surplus_pages) == (64, 64, 0, 0)
    assert p.nodes[0].nr_pages == 64
    assert h.mem.hugetlb_kb == 64 * 2048
    assert h.pool(1048576).nr_pages == 0


def test_1g_pool_only_in_sysfs(hosts):
    h = facts(hosts / "pool-1g")
    assert h.pool(1048576).nr_pages == 1 and h.pool(2048).nr_pages == 0
    # /proc/meminfo's HugePages_* cover the default size only; Hugetlb: counts every size
    assert h.mem.hugetlb_kb == 1048576


@pytest.mark.parametrize("state,value", [("thp-always", "always"), ("thp-never", "never")])
def test_thp_states(hosts, state, value):
    h = facts(hosts / state)
    assert h.thp.enabled.value == value and h.thp.defrag.value == value
    assert h.thp.shmem_enabled.value == value


def test_cmdline_parsing():
    cmd = ("BOOT_IMAGE=/vmlinuz root=/dev/sda1 hugepagesz=1G hugepages=16 default_hugepagesz=2M "
           "transparent_hugepage=never -- hugepages=99")
    assert host.parse_cmdline(cmd) == (("hugepagesz", "1G"), ("hugepages", "16"),
                                      ("default_hugepagesz", "2M"),
                                      ("transparent_hugepage", "never"))


def test_knob_parsing():
    k = parse_knob("always defer defer+madvise [madvise] never\n")
    assert k.value == "madvise" and "defer+madvise" in k.choices
    assert parse_knob("inherit").value == "inherit"
    assert parse_knob(None).value is None


def _copy(src, tmp_path):
    dst = tmp_path / "root"
    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_container_without_thp_and_pools(hosts, tmp_path):
    root = _copy(hosts / "no-pools", tmp_path)
    shutil.rmtree(root / "sys/kernel/mm")
    h = facts(root)
    assert h.pools == () and h.thp.enabled.value is None
    assert any("transparent_hugepage" in n and "missing" in n for n in h.notes)


def test_unreadable_file_is_a_note_not_a_crash(hosts, tmp_path):
    root = _copy(hosts / "no-pools", tmp_path)
    # A directory where a file should be: unreadable for root too.
    target = root / "proc/sys/vm/overcommit_memory"
    target.unlink()
    target.mkdir()
    h = facts(root)
    assert h.sysctls["vm.overcommit_memory"] is None
    assert h.mem.total_kb  # the rest is still read


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the check as another user")
def test_permission_denied_as_unprivileged_user(hosts):
    """What a container's masked file looks like: EACCES, for a real unprivileged process."""
    import tempfile
    from pathlib import Path

    from support import run_cli
    tmp = Path(tempfile.mkdtemp(prefix="hpadvise-test-"))
    try:
        os.chmod(tmp, 0o755)
        root = _copy(hosts / "no-pools", tmp)
        subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
        os.chmod(root / "proc/meminfo", 0)
        r = run_cli("check", "--root", str(root), "--json", user="nobody")
    finally:
        shutil.rmtree(tmp)
    assert r.returncode == 0, r.stderr
    import json
    d = json.loads(r.stdout)
    assert d["host"]["mem"]["total_kb"] is None
    assert any("meminfo" in n and "permission denied" in n for n in d["notes"])
    assert d["host"]["pools"][0]["size_kb"] == 2048


MOUNTINFO_V2 = ("29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - "
                "cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n")
MOUNTINFO_V1 = ("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
                "42 31 0:39 / /sys/fs/cgroup/hugetlb rw,relatime - cgroup cgroup rw,hugetlb\n")


def test_cgroup_v2_hugetlb_limits_walk_up_the_tree(hosts, tmp_path):
    root = _copy(hosts / "no-pools", tmp_path)
    (root / "proc/self/mountinfo").write_text(MOUNTINFO_V2)
    (root / "proc/self/cgroup").write_text("0::/db.slice/pg.service\n")
    cg = root / "sys/fs/cgroup"
    for d, limit in (("db.slice", "1073741824"), ("db.slice/pg.service", "max")):
        (cg / d).mkdir(parents=True, exist_ok=True)
        (cg / d / "hugetlb.2MB.max").write_text(limit + "\n")
        (cg / d / "hugetlb.2MB.rsvd.max").write_text("max\n")
        (cg / d / "hugetlb.2MB.current").write_text("0\n")
        (cg / d / "hugetlb.1GB.max").write_text("max\n")
    h = facts(root)
    assert [(c.version, c.cgroup, c.size, c.limit_bytes, c.limit_cgroup, c.rsvd_limit_bytes)
            for c in h.cgroup_hugetlb] == [(2, "/db.slice/pg.service", "2MB", 1 << 30,
                                            "/db.slice", None)]
    assert h.cgroup_hugetlb[0].file("max") == "/sys/fs/cgroup/db.slice/hugetlb.2MB.max"


def test_cgroup_v1_hugetlb(hosts, tmp_path):
    root = _copy(hosts / "no-pools", tmp_path)
    (root / "proc/self/mountinfo").write_text(MOUNTINFO_V1)
    (root / "proc/self/cgroup").write_text("3:hugetlb:/docker/abc\n1:cpu:/\n")
    d = root / "sys/fs/cgroup/hugetlb/docker/abc"
    d.mkdir(parents=True)
    (d / "hugetlb.2MB.limit_in_bytes").write_text("209715200\n")
    (d / "hugetlb.2MB.usage_in_bytes").write_text("4194304\n")
    (d / "hugetlb.2MB.failcnt").write_text("3\n")
    (d / "hugetlb.1GB.limit_in_bytes").write_text("9223372036854771712\n")  # v1 "no limit"
    h = facts(root)
    assert [(c.version, c.cgroup, c.size, c.limit_bytes, c.usage_bytes, c.max_events)
            for c in h.cgroup_hugetlb] == [(1, "/docker/abc", "2MB", 209715200, 4194304, 3)]
    assert h.cgroup_hugetlb[0].file("rsvd.max") == \
        "/sys/fs/cgroup/hugetlb/docker/abc/hugetlb.2MB.rsvd.limit_in_bytes"
