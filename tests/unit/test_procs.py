"""smaps parsing on captured postmaster smaps (PostgreSQL on hugetlb and on 4 KiB pages)."""

from hpadvise.procs import ProcTable, parse_smaps
from hpadvise.sysroot import SysRoot


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
