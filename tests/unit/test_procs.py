"""smaps parsing on captured postmaster smaps (PostgreSQL on hugetlb and on 4 KiB pages)."""

from hpadvise.facts.procs import ProcTable, parse_smaps
from hpadvise.facts.sysroot import SysRoot


def postmaster_maps(root, shared_only=False):
    procs = ProcTable(SysRoot(root))
    pm = [p for p in procs.by_name("postgres") if p.cmdline and "/tmp/" in " ".join(p.cmdline)]
    text = (root / "proc" / str(pm[0].pid) / "smaps").read_text()
    return parse_smaps(text, shared_only)


def test_hugetlb_segment(hosts):
    maps = postmaster_maps(hosts / "pg-hugetlb")
    seg = max((m for m in maps if m.shared), key=lambda m: m.size_kb)
    assert seg.path == "/anon_hugepage (deleted)" and seg.hugetlb
    assert seg.kernel_page_kb == 2048 and seg.size_kb == 72 * 2048
    assert seg.shared_hugetlb_kb > 0 and seg.rss_kb == 0
    private = [m for m in maps if not m.shared]
    assert private and all(m.kernel_page_kb == 4 for m in private)


def test_4k_segment_and_shared_only(hosts):
    maps = postmaster_maps(hosts / "pg-fallback")
    seg = max((m for m in maps if m.shared), key=lambda m: m.size_kb)
    assert seg.path == "/dev/zero (deleted)" and not seg.hugetlb and seg.kernel_page_kb == 4
    shared = postmaster_maps(hosts / "pg-fallback", shared_only=True)
    assert shared == [m for m in maps if m.shared]
    assert len(shared) < len(maps)


# JDK 11's ZGC with -XX:+UseLargePages -Xmx1g (its smaps, fields trimmed to those read): the
# heap's memfd mapped three times, and the code cache on anonymous huge pages.
ZGC_SMAPS = "".join(
    f"{head}\nSize:            {size} kB\nKernelPageSize:     2048 kB\nRss:                   0 kB\n"
    for head, size in (
        ("40000000000-4003dc00000 rw-s 00000000 00:11 122347                       "
         "/memfd:java_heap.hugetlb (deleted)", 1011712),
        ("80000000000-8003dc00000 rw-s 00000000 00:11 122347                       "
         "/memfd:java_heap.hugetlb (deleted)", 1011712),
        ("100000000000-10003dc00000 rw-s 00000000 00:11 122347                     "
         "/memfd:java_heap.hugetlb (deleted)", 1011712),
        ("7f71c1000000-7f71d0000000 rwxp 00000000 00:11 122346                     "
         "/anon_hugepage (deleted)", 245760)))


def test_a_hugetlb_file_mapped_thrice_is_counted_once():
    from hpadvise.facts.procs import hugetlb_pages, parse_smaps
    maps = parse_smaps(ZGC_SMAPS)
    assert [(m.inode, m.offset) for m in maps] == [(122347, 0)] * 3 + [(122346, 0)]
    assert hugetlb_pages(maps) == {2048: 494 + 120}
    # the file itself holds 1 GiB (what the JVM took: 632 pages)
    assert hugetlb_pages(maps, {122347: 1 << 30}) == {2048: 512 + 120}
    # views of different ranges of one file add up; overlaps count once
    a, b = maps[0], maps[1]
    from dataclasses import replace
    half = replace(b, offset=a.size_kb * 1024 // 2)
    assert hugetlb_pages([a, half]) == {2048: 494 + 247}
