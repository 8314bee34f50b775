"""What the kernel adds to a static pool's cost and reach: HugeTLB Vmemmap Optimization (HVO)
and a CMA area for gigantic pages.

- HVO (Documentation/mm/vmemmap_dedup.rst; sysctl vm.hugetlb_optimize_vmemmap in
  Documentation/admin-guide/sysctl/vm.rst; boot parameter hugetlb_free_vmemmap=on): every
  base page has a 64-byte struct page, so a 2 MiB page's struct pages fill 8 pages of
  vmemmap and a 1 GiB page's 4096; HVO keeps one and frees the rest, "7 pages per 2MB
  HugeTLB page and 4095 pages per 1GB HugeTLB page" (vm.rst), for pages allocated while it
  is on. Freeing such a page from the pool needs those vmemmap pages allocated again: under
  memory pressure that allocation fails and the page stays in the pool (vm.rst), so a
  shrink can fall short on a host with little free memory.
- hugetlb_cma= (Documentation/admin-guide/kernel-parameters.txt): a CMA area reserved at boot
  (its size, or node:size,node:size per node) from which gigantic pages are allocated at
  runtime, reliably: the area holds only movable pages, which the allocator moves out. With
  it, "the boot-time allocation of gigantic hugepages is skipped": hugepages= for 1 GiB
  pages reserves nothing, the pool is grown at runtime from the area.
"""

from __future__ import annotations

import re

STRUCT_PAGE_BYTES = 64  # sizeof(struct page) on x86-64 and arm64 (vmemmap_dedup.rst)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50,
          "E": 1 << 60}


def vmemmap_saved_kb(size_kb: int, base_kb: int = 4) -> int:
    """The vmemmap HVO frees per huge page of `size_kb`: all of its struct pages' pages but
    one (28 KiB per 2 MiB page, 16380 KiB per 1 GiB page with 4 KiB base pages)."""
    pages = size_kb // base_kb * STRUCT_PAGE_BYTES // (base_kb * 1024)
    return max(0, pages - 1) * base_kb


def parse_size(text: str) -> int | None:
    """memparse: a number with an optional K/M/G/T/P/E suffix, in bytes."""
    m = re.fullmatch(r"(\d+)([KMGTPE]?)", text.strip().upper())
    return int(m.group(1)) * _UNITS[m.group(2)] if m else None


def cma_bytes(value: str | None) -> int:
    """The hugetlb_cma= area in bytes: one size, or node:size pairs summed; 0 when absent or
    unreadable."""
    if not value:
        return 0
    total = 0
    for part in value.split(","):
        size = parse_size(part.split(":", 1)[-1])
        if size is None:
            return 0
        total += size
    return total


def hvo_on(sysctl: int | None, cmdline: dict[str, str]) -> bool:
    """Whether HVO applies to pages allocated now: the sysctl where the kernel has it (the
    boot parameter sets its initial value), else the boot parameter."""
    if sysctl is not None:
        return sysctl == 1
    return cmdline.get("hugetlb_free_vmemmap", "").lower() in ("on", "y", "1")


def hvo(host) -> bool:
    """HVO on this host (HostFacts)."""
    return hvo_on(host.sysctls.get("vm.hugetlb_optimize_vmemmap"), dict(host.cmdline_params))


def cma_asked(host) -> int:
    """The hugetlb_cma= area the command line asks for, in bytes (HostFacts)."""
    return cma_bytes(dict(host.cmdline_params).get("hugetlb_cma"))


def cma_pages(host, size_kb: int) -> int:
    """Gigantic pages of `size_kb` the hugetlb_cma= area holds (HostFacts): none where the
    kernel has no CMA (no CmaTotal in /proc/meminfo), which then ignores the parameter and
    passes it to user space (Debian 13's 6.12: "Unknown kernel command line parameters
    hugetlb_cma=2G"), nor beyond what CmaTotal says was reserved."""
    total = host.mem.cma_total_kb
    if not total:
        return 0
    return min(cma_asked(host), total * 1024) // (size_kb * 1024)
