"""Whether the host can hold each pool the plan sizes: at runtime, from a hugetlb_cma= area,
or only after a boot-time reservation; what a pool's pages take out of CommitLimit; and free
gigantic pages a growing smaller pool could be split from (demote). Findings and each
PoolPlan's feasibility are decided here; plan.py calls it for every pool."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..facts.hugetlb_kernel import cma_asked, cma_pages
from ..kit.findings import CORE
from ..kit.paths import pool_dir
from ..kit.sizing import PoolPlan, cmdline_size, commit_limit_kb, fmt_bytes, fmt_page

if TYPE_CHECKING:
    from ..api.model import Report


def demote(r: Report) -> None:
    """Free gigantic pages the plan does not need while a smaller size's pool grows: they can
    be split in place (hugepages-<kB>/demote, Documentation/admin-guide/mm/hugetlbpage.rst,
    Linux 5.16), which needs no new contiguous memory. Named, not made: the split cannot be
    undone without allocating the gigantic pages again, so a rollback could not promise it."""
    host = r.host
    planned = {p.size_kb: p.target_pages for p in r.pools}
    up = [p for p in r.pools if not host.is_gigantic(p.size_kb)
          and p.target_pages > (p.current_pages or 0)]
    for big in host.pools:
        if not host.is_gigantic(big.size_kb) or not big.free_pages:
            continue
        spare = min(big.free_pages, big.claimed_pages + big.free_pages
                    - planned.get(big.size_kb, big.claimed_pages))
        for small in up:
            n = min(spare, -(-(small.target_pages - (small.current_pages or 0))
                             * small.size_kb // big.size_kb))
            if n <= 0:
                continue
            path = pool_dir(big.size_kb)
            r.findings.append(CORE["pool.demote"](
                f"{n} free {fmt_page(big.size_kb)} pages the plan does not need can become "
                f"{n * big.size_kb // small.size_kb} {fmt_page(small.size_kb)} pages in place, "
                "with no new contiguous memory: where the smaller pool falls short on a "
                f"fragmented host, `echo {small.size_kb}kB > {path}/demote_size; echo {n} > "
                f"{path}/demote` does it (it cannot be undone without allocating the large "
                "pages again, so apply does not).",
                f"{fmt_page(big.size_kb)} pool: {big.free_pages} free; "
                f"{fmt_page(small.size_kb)} pool {small.current_pages} -> {small.target_pages}",
                title=f"Demote {n} free {fmt_page(big.size_kb)} pages instead of allocating"))


def feasibility(r: Report, pp: PoolPlan) -> PoolPlan:
    """Whether the pool can be grown at runtime, or has to be reserved at boot (the OS floor
    is judged over every pool afterwards)."""
    grow = pp.target_pages - (pp.current_pages or 0)
    if grow <= 0:
        return dataclasses.replace(pp, feasibility_reason="the pool holds the pages already")
    host = r.host
    boot = f"kernel command line: hugepagesz={cmdline_size(pp.size_kb)} " \
           f"hugepages={pp.target_pages}"
    if host.is_gigantic(pp.size_kb) and (cma := cma_pages(host, pp.size_kb)):
        # a CMA area for them: granted at runtime, and the only way (boot allocation of
        # gigantic pages is skipped with hugetlb_cma=; hugetlb_kernel.py)
        page, room = fmt_page(pp.size_kb), cma - (pp.current_pages or 0)
        if grow <= room:
            return dataclasses.replace(pp, feasibility_reason=(
                f"{grow} more from the hugetlb_cma= area, which holds {cma} {page} pages"))
        r.findings.append(CORE["pool.gigantic_runtime"](
            f"The hugetlb_cma= area holds {cma} {page} pages and {pp.current_pages or 0} are "
            f"taken; with it the kernel skips gigantic pages at boot (kernel-parameters.txt), "
            f"so the area itself must grow to {fmt_bytes(pp.target_pages * pp.size_kb * 1024)}.",
            f"hugetlb_cma={dict(host.cmdline_params).get('hugetlb_cma')}; target "
            f"{pp.target_pages}", title=f"The hugetlb_cma= area is {grow - room} {page} pages "
                                        "short"))
        return dataclasses.replace(pp, feasibility="boot_reservation", feasibility_reason=(
            f"the hugetlb_cma= area holds {cma} {page} pages, {pp.target_pages} are needed: "
            f"kernel command line: hugetlb_cma={pp.target_pages * pp.size_kb // 1048576}G"))
    if host.is_gigantic(pp.size_kb):
        page = fmt_page(pp.size_kb)
        ignored = (" This kernel has no CMA (no CmaTotal in /proc/meminfo): it ignored the "
                   "hugetlb_cma= on its command line.") if cma_asked(host) else ""
        r.findings.append(CORE["pool.gigantic_runtime"](
            f"{page} pages are larger than the buddy allocator's largest block: each needs a "
            f"physically contiguous, aligned {page} range, and a runtime allocation can fall "
            "short on a host that has been up for a while. Reserving them at boot "
            f"(hugepagesz={cmdline_size(pp.size_kb)} hugepages={pp.target_pages}) always works."
            + ignored,
            f"target {pp.target_pages}, now {pp.current_pages}",
            title=f"{grow} more {page} pages needed at runtime"))
        return dataclasses.replace(pp, feasibility="boot_reservation", feasibility_reason=(
            f"{page} pages (gigantic) cannot be relied on at runtime; " + boot))
    can = host.runtime_allocatable_pages(pp.size_kb)
    if can is not None and can < grow:
        r.findings.append(CORE["pool.fragmented"](
            "The kernel must compact memory to grow the pool and may still fall short; apply "
            "compacts first. A boot-time reservation (hugepages= on the kernel command line) "
            "avoids the problem.", f"buddyinfo: {can} blocks of order >= "
                                   f"{host.order_for(pp.size_kb)}" + (
                f", counting {fmt_bytes(host.unlisted_free_bytes)} free but not listed yet"
                if host.unlisted_free_bytes else ""),
            title=f"Free memory holds only {can} free {fmt_page(pp.size_kb)} blocks; {grow} "
                  "are needed"))
        return dataclasses.replace(pp, feasibility="boot_reservation", feasibility_reason=(
            f"free memory holds {can} blocks of {fmt_page(pp.size_kb)}, {grow} are needed; "
            + boot))
    return dataclasses.replace(pp, feasibility_reason=f"{grow} more pages can be set now")


def commit_limit(r: Report, pool_kb: int) -> None:
    """Reserved huge pages leave CommitLimit: under overcommit_memory=2 a large pool can make
    ordinary allocations fail (Documentation/mm/overcommit-accounting.rst)."""
    host, m = r.host, r.host.mem
    if host.sysctls.get("vm.overcommit_memory") != 2 or m.total_kb is None:
        return
    new_limit = commit_limit_kb(m.total_kb, pool_kb, host.sysctls.get("vm.overcommit_ratio") or 50,
                                m.swap_total_kb or 0, host.sysctls.get("vm.overcommit_kbytes") or 0)
    committed = m.committed_as_kb or 0
    margin = new_limit * r.profile.commit_min_free_pct / 100
    if committed > new_limit - margin:
        r.findings.append(CORE["commit.limit"](
            "Under vm.overcommit_memory=2, memory reserved for huge pages is taken out of "
            "CommitLimit; Committed_AS is already close to that, so allocations would fail. "
            "Raise vm.overcommit_ratio to make up for the pool.",
            f"Committed_AS {fmt_bytes(committed * 1024)}, CommitLimit now "
            f"{fmt_bytes((m.commit_limit_kb or 0) * 1024)}",
            title=f"With the planned pools CommitLimit falls to {fmt_bytes(new_limit * 1024)}"))
