"""Page geometries other than x86-64's: sizes as the kernel names them on its command line and
in hugetlb cgroup files, gigantic sizes judged from the buddy allocator's orders, probe's
variants from the kernel's own sizes (arm64: Documentation/arch/arm64/hugetlbpage.rst)."""

from hpadvise.cgroups import size_name
from hpadvise.probe import Geometry, variants_for
from hpadvise.sizing import cmdline_size, fmt_page

KB = 1
MB = 1024
GB = 1024 * 1024


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
