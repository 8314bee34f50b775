"""What a running PostgreSQL cluster's processes show: whether its main shared memory segment
sits on huge pages (the postmaster's smaps) and what page tables its backends build."""

from __future__ import annotations

from hpadvise.api.face import HostFacts, Instance, Proc, ProcTable, backing_of

from .actions import main_segment
from .sizing import page_kb_of
from .state import Cluster


def observe(inst: Instance, c: Cluster, procs: ProcTable, host: HostFacts) -> None:
    """What a running cluster's processes show: the backing of its main segment (smaps),
    its page tables now and on huge pages (VmPTE, RssShmem)."""
    pm = Proc(procs.sr, inst.pid) if inst.pid else None
    if pm is None:
        return
    maps = pm.shared_mappings
    if maps is None:
        c.observe_note = ("smaps unreadable: run as root or as "
                                        f"{inst.owner} to verify the backing")
    else:
        m = main_segment(maps)
        if m is not None:
            c.shm_mapping = m
            b = backing_of([m], host.thp.pmd_size_kb, host.base_page_bytes // 1024)
            inst.backing, inst.backing_page_kb = b.kind, b.page_kb
    members = [pm] + procs.children(inst.pid)
    ptes = [p.vm_pte_kb for p in members if p.vm_pte_kb is not None]
    if ptes:
        inst.page_tables_kb = sum(ptes)
        # Page-table cost of the shared memory each backend touched: one 8-byte PTE per
        # 4 KiB page (x86-64 paging) = RssShmem / 512; on huge pages one entry per huge page.
        huge_kb = page_kb_of(0, host) or 2048
        est = 0.0
        for p in members:
            pte, shm = p.vm_pte_kb or 0, p.rss_shmem_kb or 0
            if inst.backing == "hugetlb":
                est += pte
            else:
                est += max(0.0, pte - shm / 512) + shm * 8 / (huge_kb * 1024)
        inst.page_tables_huge_kb = int(est)
        inst.settings["processes"] = len(members)
