"""Page geometries other than x86-64's: sizes as the kernel names them on its command line and
in hugetlb cgroup files, gigantic sizes judged from the buddy allocator's orders, probe's
variants from the kernel's own sizes (arm64: Documentation/arch/arm64/hugetlbpage.rst)."""

from pathlib import Path

from hpadvise.facts.cgroups import size_name
from hpadvise.facts.probe import Geometry, variants_for
from hpadvise.kit.sizing import cmdline_size, fmt_page
from hpadvise.kit.knob_id import KnobId

KB = 1
MB = 1024
GB = 1024 * 1024
GUESTS = Path(__file__).resolve().parent.parent / "fixtures" / "guests"


def test_sizes_as_the_kernel_writes_them():
    # memparse's suffixes on the command line; mem_fmt() in mm/hugetlb_cgroup.c for cgroups
    table = {64 * KB: ("64K", "64KB", "64 KiB"), 2 * MB: ("2M", "2MB", "2 MiB"),
             32 * MB: ("32M", "32MB", "32 MiB"), 512 * MB: ("512M", "512MB", "512 MiB"),
             1 * GB: ("1G", "1GB", "1 GiB"), 16 * GB: ("16G", "16GB", "16 GiB")}
    for kb, (cmd, cg, people) in table.items():
        assert (cmdline_size(kb), size_name(kb), fmt_page(kb)) == (cmd, cg, people), kb


def test_probe_variants_are_the_kernels_sizes():
    x86 = Geometry(4, 2 * MB, (2 * MB, 1 * GB), (1 * GB,))
    assert [v.name for v in variants_for(x86)] == ["4 KiB", "2 MiB THP", "2 MiB hugetlb",
                                                    "1 GiB hugetlb"]
    arm4k = Geometry(4, 2 * MB, (64 * KB, 2 * MB, 32 * MB, 1 * GB), (32 * MB, 1 * GB))
    assert [v.page_kb for v in variants_for(arm4k)] == [4, 2 * MB, 64, 2 * MB, 32 * MB, 1 * GB]
    arm64k = Geometry(64, 512 * MB, (2 * MB, 512 * MB, 16 * GB), (16 * GB,))
    assert [v.name for v in variants_for(arm64k)] == [
        "64 KiB", "512 MiB THP", "2 MiB hugetlb", "512 MiB hugetlb", "16 GiB hugetlb"]
    # without THP built in: no THP variant
    assert [v.name for v in variants_for(Geometry(4, None, (2 * MB,)))] == ["4 KiB",
                                                                           "2 MiB hugetlb"]


def test_a_snapshot_keeps_the_units_a_wants_directory_links(tmp_path):
    """A unit is enabled by its link in a .wants directory: the name is the fact. Captured in
    the arm64 guest, the snapshot had lost the link, and check offline said the 32 MiB pool
    apply had persisted was set by nothing at the next boot."""
    import os

    from hpadvise.facts import boot
    from hpadvise.outputs.snapshot import write_snapshot
    from hpadvise.facts.sysroot import SysRoot
    live = tmp_path / "live"
    unit = live / "etc/systemd/system/hpadvise-hugepages.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/bin/sh -c 'echo 10 > "
                    "/sys/kernel/mm/hugepages/hugepages-32768kB/nr_hugepages'\n")
    wants = live / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir()
    os.symlink(str(unit), wants / "hpadvise-hugepages.service")
    (live / "etc/postgresql/15/main").mkdir(parents=True)
    (live / "etc/postgresql/15/main/postgresql.conf").write_text("port = 5432\n")
    sr = SysRoot(str(live), record=True)
    before = boot._unit_setters(sr, 2048, True)
    sr.listdir("/etc/postgresql")
    sr.read("/etc/postgresql/15/main/postgresql.conf")
    write_snapshot(sr, str(tmp_path / "snap"))
    after = boot._unit_setters(SysRoot(str(tmp_path / "snap")), 2048, True)
    assert [(s.knob, s.value) for s in after] == [(s.knob, s.value) for s in before] == [
        (KnobId.pool(32768), "10")]
    # a listed name that is a directory read below stays a directory
    assert (tmp_path / "snap/etc/postgresql/15/main/postgresql.conf").read_text() == "port = 5432\n"


def _model_64k(src, dest):
    """arm64 with the 64 KiB granule, modelled on the tree captured in the arm64 guest (4 KiB
    granule): no Debian kernel is built with it. From Documentation/arch/arm64/hugetlbpage.rst
    and arch/arm64/Kconfig: base page 64 KiB; hugetlb sizes 2 MiB (contiguous PTEs), 512 MiB
    (PMD, the default and THP's size), 16 GiB (contiguous PMDs); buddy orders 0-13 (largest
    block 512 MiB). The running server is left out: only the stopped cluster's files remain."""
    import re
    import shutil
    shutil.copytree(src, dest, symlinks=True)
    for base in ("sys/kernel/mm/hugepages", "sys/devices/system/node/node0/hugepages"):
        d = dest / base
        for old in d.iterdir():
            shutil.rmtree(old)
        for kb in (2048, 524288, 16777216):
            (d / f"hugepages-{kb}kB").mkdir()
            names = ("nr", "free", "surplus") if "node0" in base else (
                "nr", "free", "resv", "surplus", "nr_overcommit")
            for n in names:
                (d / f"hugepages-{kb}kB" / f"{n}_hugepages").write_text("0\n")
    meminfo = dest / "proc/meminfo"
    meminfo.write_text(re.sub(r"Hugepagesize:\s+\d+ kB", "Hugepagesize:     524288 kB",
                              meminfo.read_text()).replace("Hugetlb:          327680 kB",
                                                           "Hugetlb:               0 kB"))
    (dest / "sys/kernel/mm/transparent_hugepage/hpage_pmd_size").write_text("536870912\n")
    smaps = dest / "proc/self/smaps"
    smaps.write_text(smaps.read_text().replace("KernelPageSize:        4 kB",
                                               "KernelPageSize:       64 kB"))
    (dest / "proc/buddyinfo").write_text(
        "Node 0, zone      DMA " + " ".join(["3"] * 14) + "\n"
        "Node 0, zone   Normal " + " ".join(["20"] * 13) + " 4\n")
    for p in (dest / "proc").iterdir():
        if p.name.isdigit() and "postgres" in (p / "cmdline").read_text(errors="replace") \
                if (p / "cmdline").exists() else False:
            shutil.rmtree(p)
    return dest


def test_arm64_64k_granule_modelled(tmp_path):
    from hpadvise.facts import host
    from hpadvise.facts.sysroot import SysRoot
    tree = _model_64k(GUESTS / "arm64-4k-pg32m", tmp_path / "arm64-64k")
    h = host.collect(SysRoot(str(tree)))
    assert h.base_page_bytes == 65536 and h.default_hugepage_kb == 512 * MB
    assert h.thp.pmd_size_kb == 512 * MB
    assert not h.is_gigantic(512 * MB) and h.is_gigantic(16 * GB)
    g = h.geometry()
    assert [v.name for v in variants_for(g)] == ["64 KiB", "512 MiB THP", "2 MiB hugetlb",
                                                  "512 MiB hugetlb", "16 GiB hugetlb"]
    assert g.gigantic_kb == (16 * GB,)
    assert h.runtime_allocatable_pages(16 * GB) is None
    # order 13 (the last column) holds 512 MiB blocks: 3 in DMA and 4 in Normal
    assert h.runtime_allocatable_pages(512 * MB) == 3 + 4


def test_arm64_4k_granule_as_captured(tmp_path):
    """The arm64 guest's own tree (Debian 12's 6.1, 4 KiB granule), PostgreSQL 15 on 32 MiB
    pages (huge_page_size = 32MB): four sizes, 32 MiB and 1 GiB gigantic, the server's
    shared memory counted in 32 MiB pages as it holds them."""
    from hpadvise.planning import pipeline
    from hpadvise.facts.sysroot import SysRoot
    r = pipeline.inspect(SysRoot(str(GUESTS / "arm64-4k-pg32m")), engine_names=["postgres"])
    h = r.host
    assert sorted(h.page_sizes_kb) == [64, 2 * MB, 32 * MB, 1 * GB]
    assert [kb for kb in sorted(h.page_sizes_kb) if h.is_gigantic(kb)] == [32 * MB, 1 * GB]
    i = next(i for i in r.instances if i.id == "postgres:5440")
    assert i.backing == "hugetlb" and i.backing_page_kb == 32 * MB
    assert i.demand.page_kb == 32 * MB and i.demand.pages[32 * MB] == 9 == i.demand.held_pages
    (pool,) = [p for p in r.pools if p.size_kb == 32 * MB]
    # 1% of 9 x 32 MiB is 2.9 MiB, under one gigantic page: no headroom (sizing.headrooms)
    assert pool.target_pages == 9 and pool.headroom_pages == 0 and pool.current_pages == 10


def test_a_command_line_size_the_kernel_does_not_offer(tmp_path):
    """arm64 with 64 KiB pages refuses hugepagesz=1G at boot (arch_hugetlb_valid_size); the
    hugepages= after it reserves nothing. check says so; a size it offers is only noted."""
    from hpadvise.planning import pipeline
    from hpadvise.kit.sizing import cmdline_kb
    from hpadvise.facts.sysroot import SysRoot
    for kb in (64, 2 * MB, 32 * MB, 512 * MB, 1 * GB, 16 * GB):
        assert cmdline_kb(cmdline_size(kb)) == kb
    tree = _model_64k(GUESTS / "arm64-4k-pg32m", tmp_path / "arm64-64k")
    (tree / "proc/cmdline").write_text("root=/dev/vda rw hugepagesz=1G hugepages=4 "
                                       "hugepagesz=512M hugepages=2\n")
    r = pipeline.inspect(SysRoot(str(tree)), engine_names=["postgres"])
    sz = [f for f in r.findings if f.code == "cmdline.hugepagesz"]
    assert [(f.severity, f.title) for f in sz] == [
        ("warn", "Kernel command line: hugepagesz=1G, a size this kernel does not offer"),
        ("info", "Kernel command line: hugepagesz=512M")]
    assert "This kernel offers 2 MiB, 512 MiB, 16 GiB" in sz[0].rationale
