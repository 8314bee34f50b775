"""/proc/meminfo, read in one place (Documentation/filesystems/proc.rst, "meminfo"): the host's
memory, the default size's huge pages and what THP holds."""

from __future__ import annotations

from dataclasses import dataclass

from .sysroot import SysRoot, kb


@dataclass(frozen=True)
class MemInfo:
    total_kb: int | None
    available_kb: int | None
    commit_limit_kb: int | None
    committed_as_kb: int | None
    page_tables_kb: int | None
    hugetlb_kb: int | None  # "Hugetlb:" covers every page size (kernel >= 4.16)
    free_kb: int | None  # MemFree
    anon_huge_kb: int | None
    shmem_huge_kb: int | None
    shmem_pmd_mapped_kb: int | None
    swap_total_kb: int | None
    default_hugepage_kb: int | None
    cma_total_kb: int | None = None  # CmaTotal: absent where the kernel has no CMA at all
    file_pmd_mapped_kb: int | None = None  # FilePmdMapped (proc.rst)


def read_meminfo(sr: SysRoot, path: str = "/proc/meminfo") -> MemInfo:
    m = sr.read_kv(path) or {}
    return MemInfo(
        total_kb=kb(m.get("MemTotal")), available_kb=kb(m.get("MemAvailable")),
        commit_limit_kb=kb(m.get("CommitLimit")), committed_as_kb=kb(m.get("Committed_AS")),
        page_tables_kb=kb(m.get("PageTables")), hugetlb_kb=kb(m.get("Hugetlb")),
        free_kb=kb(m.get("MemFree")),
        anon_huge_kb=kb(m.get("AnonHugePages")), shmem_huge_kb=kb(m.get("ShmemHugePages")),
        shmem_pmd_mapped_kb=kb(m.get("ShmemPmdMapped")), swap_total_kb=kb(m.get("SwapTotal")),
        cma_total_kb=kb(m.get("CmaTotal")), file_pmd_mapped_kb=kb(m.get("FilePmdMapped")),
        default_hugepage_kb=kb(m.get("Hugepagesize")),
    )
