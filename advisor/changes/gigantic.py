"""Gigantic pages (1 GiB on x86-64; 32 MiB and 1 GiB on arm64 with 4 KiB pages) at runtime where
the kernel can give them.

A 1 GiB page needs a free, aligned 1 GiB range of memory the buddy allocator manages
(alloc_contig_pages; Documentation/admin-guide/mm/hugetlbpage.rst). A kernel that
initialises its struct pages lazily (deferred_init=lazy) hands free memory to the buddy
allocator only as ordinary allocations ask for it, and a gigantic page's allocation does not
ask: on a freshly booted 126 GiB host with 125 GiB free the kernel granted 2 of 67 1 GiB
pages, and after a 60,000-page 2 MiB pool had been made and released (0.76 s), 67 and then
110. So when a 1 GiB pool falls short, apply makes a transient pool of the smaller size
(journaled, so that a kill in between is rolled back; released at once), which pulls the
memory in, and asks again. Only where free memory is not listed yet (HostFacts.
unlisted_free_bytes): elsewhere it would only squeeze the page cache.
"""

from __future__ import annotations

from typing import Callable

from .actions import Pool
from ..facts.host import HostFacts, read_meminfo
from ..kit.sizing import fmt_bytes, fmt_page
from ..facts.sysroot import SysRoot


def transient_pages(host: HostFacts, small_kb: int, missing: int, big_kb: int) -> int:
    """Pages of the smaller size to allocate and release: the blocks already listed (the
    allocator takes those first) and the missing gigantic pages' worth of memory not listed
    yet, one more for alignment; never more than 90% of what is free now."""
    small_b = small_kb * 1024
    listed = (host.runtime_allocatable_pages(small_kb) or 0) - host.unlisted_free_bytes // small_b
    want = listed + (missing + 1) * big_kb // small_kb
    free = (read_meminfo(SysRoot("/")).free_kb or 0) * 1024
    return max(0, min(want, free * 9 // 10 // small_b))


def pull_in(host: HostFacts, big: Pool, wanted: int, journal, say: Callable[[str], None]
            ) -> int:
    """Ask again for `wanted` gigantic pages after a transient pool of the smallest size has
    pulled free memory into the buddy allocator. Returns what the gigantic pool holds then;
    the transient pool is back to what it was, whatever happens."""
    # the largest size the buddy allocator serves (2 MiB on x86-64 and on arm64 with 4 KiB
    # pages, where 64 KiB pages would take 32 times as many allocations)
    smaller = [k for k in host.page_sizes_kb if k < big.size_kb and not host.is_gigantic(k)]
    granted = big.get()
    if not smaller or not host.unlisted_free_bytes or granted >= wanted:
        return granted
    small = Pool(max(smaller), node=big.node, root=big.root)
    before = small.get()
    n = transient_pages(host, small.size_kb, wanted - granted, big.size_kb)
    if n <= 0:
        return granted
    say(f"{big.label}: the kernel granted {granted} of {wanted}; "
        f"{fmt_bytes(host.unlisted_free_bytes)} of free memory is not initialised yet: a "
        f"transient pool of {n} x {fmt_page(small.size_kb)} pulls it in, then it asks again")
    e = journal.intent(small, before, before + n)
    try:
        small.set(before + n)
        made = small.get() - before
    finally:
        small.set(before)
        journal.done(e, small.get())
    big.set(wanted)
    got = big.get()
    say(f"{big.label}: {made} x {fmt_page(small.size_kb)} made and released; the kernel "
        f"granted {got} of {wanted} now")
    return got
