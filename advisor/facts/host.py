"""HostFacts: what the kernel says about memory, huge page pools and THP.

Everything is read through a SysRoot. Sources:
- Documentation/admin-guide/mm/hugetlbpage.rst: /proc/meminfo shows the *default* size only;
  every size has /sys/kernel/mm/hugepages/hugepages-<N>kB/{nr,free,resv,surplus,
  nr_overcommit}_hugepages, and per node /sys/devices/system/node/nodeN/hugepages/.
- Documentation/admin-guide/mm/transhuge.rst: THP knobs, khugepaged, per-size mTHP dirs,
  thp_* counters in /proc/vmstat.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .boot import Boot
from .boot import read as read_boot
from .thp_knobs import SizesAtBoot
from ..kit.paths import HUGEPAGES_DIR as HUGEPAGES, NODES_DIR as NODES, pool_dir
from .cgroups import (HugetlbLimit, MemoryLimit, hidden_ancestors, hugetlb_accounting,
                      memory_limit)
from .cgroups import limits as cgroup_limits
from .platform import read_cpu_flags, read_isolation, read_memlock, read_virtualization
from .meminfo import MemInfo, read_meminfo  # noqa: F401 (the facts' one reader)
from .sysroot import SysRoot, size_dirs
from .thp_rules import THPFacts, ThpUser, read_thp, read_thp_users
from .sysctls import SYSCTLS as DECLARED

if TYPE_CHECKING:
    from .limitprobe import MeasuredLimit


# Kernel command line parameters that shape pools and THP
# (Documentation/admin-guide/kernel-parameters.txt).
CMDLINE_KEYS = (
    "hugepages", "hugepagesz", "default_hugepagesz", "hugetlb_free_vmemmap", "hugetlb_cma",
    "transparent_hugepage", "transparent_hugepage_shmem", "transparent_hugepage_tmpfs",
    "thp_anon", "thp_shmem", "numa", "memhp_default_state",
)
# those of them that set the pools and the THP mode at boot, before any setting a running
# system persists (kernel-parameters.txt): check names them, apply warns of them
CMDLINE_SETS_BOOT = ("hugepages", "hugepagesz", "default_hugepagesz", "transparent_hugepage",
                     "transparent_hugepage_shmem")

# the settings under /proc/sys check reads, each declared once (sysctls.py)
SYSCTLS = {s.name: s.path for s in DECLARED}


@dataclass(frozen=True)
class NodePool:
    node: int
    nr_pages: int | None
    free_pages: int | None
    surplus_pages: int | None


@dataclass(frozen=True)
class HugePool:
    size_kb: int
    nr_pages: int | None
    free_pages: int | None
    resv_pages: int | None
    surplus_pages: int | None
    overcommit_pages: int | None
    nodes: tuple[NodePool, ...] = ()

    @property
    def size_bytes(self) -> int:
        return self.size_kb * 1024

    @property
    def claimed_pages(self) -> int:
        """Pages running processes hold or have reserved: in use (nr - free) plus resv."""
        if self.nr_pages is None or self.free_pages is None:
            return 0
        return self.nr_pages - self.free_pages + (self.resv_pages or 0)

    @property
    def persistent_pages(self) -> int | None:
        """What was asked for with nr_hugepages: sysfs nr_hugepages includes surplus pages."""
        if self.nr_pages is None:
            return None
        return self.nr_pages - (self.surplus_pages or 0)

    @property
    def available_pages(self) -> int | None:
        """Pages neither faulted in nor reserved by a mapping (free - resv)."""
        if self.free_pages is None or self.resv_pages is None:
            return None
        return self.free_pages - self.resv_pages


@dataclass(frozen=True)
class BuddyZone:
    node: int
    zone: str
    free_blocks: tuple[int, ...]  # index = order

    def free_bytes_at_order(self, order: int, base_page_bytes: int) -> int:
        """Free memory in blocks of `order` or larger: what a runtime allocation can take
        without compaction (Documentation/admin-guide/mm/hugetlbpage.rst, buddyinfo)."""
        return sum(n << o for o, n in enumerate(self.free_blocks) if o >= order) * base_page_bytes


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    options: str


@dataclass(frozen=True)
class HostFacts:
    kernel: str | None
    base_page_bytes: int
    mem: MemInfo
    pools: tuple[HugePool, ...]
    numa_nodes: tuple[int, ...]
    thp: THPFacts
    cmdline: str | None
    cmdline_params: tuple[tuple[str, str], ...]
    sysctls: dict[str, int | None]
    memlock_soft: str | None
    memlock_hard: str | None
    cpu_flags: frozenset[str]
    virtualization: str | None
    container: str | None  # a marker file's hint (docker, podman, kubernetes)
    hugetlbfs_mounts: tuple[Mount, ...]
    cgroup_hugetlb: tuple[HugetlbLimit, ...]  # the limits on hpadvise's own process
    buddy: tuple[BuddyZone, ...]
    vmstat: dict[str, int]
    notes: tuple[str, ...] = field(default=())
    # hpadvise runs inside a container (its own PID namespace), and what says so
    in_container: bool = False
    container_evidence: tuple[str, ...] = ()
    # what sets the huge page and THP knobs at the next boot (boot.py)
    boot: Boot | None = None
    hostname: str | None = None
    # cgroup v2 mounts whose cgroups above are out of sight (a cgroup namespace)
    cgroup_hidden: tuple[str, ...] = ()
    # the cgroup v2 mount charges huge pages to memory.max too (memory_hugetlb_accounting)
    hugetlb_accounting: bool = False
    memory_limit: MemoryLimit | None = None  # the tightest memory limit on hpadvise itself
    # check --measure-limits: what faulting free huge pages from hpadvise's cgroup found
    limit_measured: tuple[MeasuredLimit, ...] = ()
    # processes with shared or file memory on THP now (thp_rules.py)
    thp_users: tuple[ThpUser, ...] = ()

    def pool(self, size_kb: int) -> HugePool | None:
        return next((p for p in self.pools if p.size_kb == size_kb), None)

    @property
    def page_sizes_kb(self) -> tuple[int, ...]:
        return tuple(p.size_kb for p in self.pools)

    @property
    def default_hugepage_kb(self) -> int | None:
        return self.mem.default_hugepage_kb

    @property
    def supports_1g(self) -> bool:
        """The kernel offers 1 GiB pages: it lists the size only where the CPU has them (x86:
        X86_FEATURE_GBPAGES, the pdpe1gb flag; arm64 with a 4 KiB granule: always;
        arch/*/mm/hugetlbpage.c)."""
        return self.pool(1048576) is not None

    def order_for(self, size_kb: int) -> int:
        return max(0, (size_kb * 1024 // self.base_page_bytes).bit_length() - 1)

    def is_gigantic(self, size_kb: int) -> bool:
        """A size above the buddy allocator's largest block (buddyinfo lists orders 0..MAX):
        such pages come from contiguous ranges (alloc_contig_pages) or a boot reservation,
        never from the free lists (mm/hugetlb.h, hstate_is_gigantic). Without buddyinfo, the
        x86-64 rule: 1 GiB and above."""
        if self.buddy:
            return self.order_for(size_kb) >= len(self.buddy[0].free_blocks)
        return size_kb >= 1048576

    def geometry(self):
        """The kernel's page sizes, for probe: base page, THP's PMD size (where THP is
        built in), every hugetlb size offered, and which of those are gigantic."""
        from .probe import Geometry
        sizes = tuple(sorted(p.size_kb for p in self.pools))
        return Geometry(self.base_page_bytes // 1024,
                        self.thp.pmd_size_kb if self.thp.enabled.value is not None else None,
                        sizes, tuple(kb for kb in sizes if self.is_gigantic(kb)))

    @property
    def unlisted_free_bytes(self) -> int:
        """Free memory the buddy allocator does not list yet: MemFree counts it, buddyinfo
        does not. A kernel that initialises its struct pages lazily (deferred_init=lazy on
        this platform's kernels, CONFIG_DEFERRED_STRUCT_PAGE_INIT) hands most of a freshly
        booted host's memory to the buddy allocator only as allocations ask for it: measured
        on a fresh 24 GiB VM, buddyinfo listed 3.8 GiB of 22.9 GiB free; on a 126 GiB host 21
        order-10 blocks before a 60,000-page 2 MiB pool was made and released, 30,012 after.
        Ordinary allocations (a 2 MiB pool's) pull it in; a 1 GiB page's does not. Below
        1 GiB or 1% of memory the difference is per-CPU lists and rounding, and not counted."""
        if not self.buddy or self.mem.free_kb is None:
            return 0
        listed = sum(z.free_bytes_at_order(0, self.base_page_bytes) for z in self.buddy)
        extra = self.mem.free_kb * 1024 - listed
        return extra if extra > max(1 << 30, (self.mem.total_kb or 0) * 1024 // 100) else 0

    def runtime_allocatable_pages(self, size_kb: int) -> int | None:
        """Pages of `size_kb` that free memory could hold right now, without compaction: free
        buddy blocks of that order or larger, and free memory not listed yet (whole
        pageblocks when it comes). None when buddyinfo is unreadable or the size is above the
        buddy allocator's max order (1 GiB pages come from alloc_contig_pages, not the buddy
        lists)."""
        if not self.buddy:
            return None
        order = self.order_for(size_kb)
        if order >= len(self.buddy[0].free_blocks):
            return None
        free = sum(z.free_bytes_at_order(order, self.base_page_bytes) for z in self.buddy)
        return (free + self.unlisted_free_bytes) // (size_kb * 1024)


def read_pools(sr: SysRoot, nodes: tuple[int, ...]) -> tuple[HugePool, ...]:
    pools = []
    for size_kb, d in size_dirs(sr, HUGEPAGES):
        per_node = []
        for n in nodes:
            nd = pool_dir(size_kb, n)
            per_node.append(NodePool(n, sr.read_int(f"{nd}/nr_hugepages"),
                                     sr.read_int(f"{nd}/free_hugepages"),
                                     sr.read_int(f"{nd}/surplus_hugepages")))
        pools.append(HugePool(
            size_kb, sr.read_int(f"{d}/nr_hugepages"), sr.read_int(f"{d}/free_hugepages"),
            sr.read_int(f"{d}/resv_hugepages"), sr.read_int(f"{d}/surplus_hugepages"),
            sr.read_int(f"{d}/nr_overcommit_hugepages"), tuple(per_node)))
    return tuple(pools)


def read_numa_nodes(sr: SysRoot) -> tuple[int, ...]:
    return tuple(sorted(int(n[4:]) for n in sr.listdir(NODES) if re.fullmatch(r"node\d+", n)))


def parse_cmdline(cmdline: str | None) -> tuple[tuple[str, str], ...]:
    if not cmdline:
        return ()
    # Arguments after a bare "--" go to init, not the kernel.
    kernel_part = cmdline.split(" -- ", 1)[0]
    out = []
    for word in kernel_part.split():
        key, _, value = word.partition("=")
        if key in CMDLINE_KEYS:
            out.append((key, value))
    return tuple(out)


def read_mounts(sr: SysRoot) -> tuple[Mount, ...]:
    out = []
    for line in (sr.read("/proc/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "hugetlbfs":
            out.append(Mount(parts[0], parts[1], parts[3]))
    return tuple(out)


def read_buddyinfo(sr: SysRoot) -> tuple[BuddyZone, ...]:
    out = []
    for line in (sr.read("/proc/buddyinfo") or "").splitlines():
        mt = re.match(r"Node\s+(\d+),\s+zone\s+(\S+)\s+(.*)", line)
        if mt:
            out.append(BuddyZone(int(mt.group(1)), mt.group(2),
                                 tuple(int(x) for x in mt.group(3).split())))
    return tuple(out)


def read_vmstat(sr: SysRoot) -> dict[str, int]:
    out = {}
    for line in (sr.read("/proc/vmstat") or "").splitlines():
        key, _, value = line.partition(" ")
        if key.startswith(("thp_", "compact_", "htlb_")) and value.strip().isdigit():
            out[key] = int(value)
    return out


def read_base_page_bytes(sr: SysRoot) -> int:
    # KernelPageSize of the first mapping of any process is the base page size; fall back to
    # the running interpreter's value (identical on a live host).
    text = sr.read("/proc/self/smaps", quiet_missing=True, limit=2048) or ""
    mt = re.search(r"KernelPageSize:\s+(\d+) kB", text)
    if mt:
        return int(mt.group(1)) * 1024
    import os
    return os.sysconf("SC_PAGE_SIZE")


def collect(sr: SysRoot) -> HostFacts:
    nodes = read_numa_nodes(sr)
    flags = read_cpu_flags(sr)
    virt, container = read_virtualization(sr, flags)
    inside, evidence = read_isolation(sr, container)
    cmdline = sr.read("/proc/cmdline")
    soft, hard = read_memlock(sr)
    release = sr.read("/proc/sys/kernel/osrelease")
    mem = read_meminfo(sr)
    thp = read_thp(sr)
    boot = read_boot(sr, mem.default_hugepage_kb, SizesAtBoot.of(thp, release))
    return HostFacts(
        kernel=release.strip() if release else None,
        base_page_bytes=read_base_page_bytes(sr),
        mem=mem,
        pools=read_pools(sr, nodes),
        numa_nodes=nodes,
        thp=thp,
        thp_users=read_thp_users(sr, (mem.shmem_pmd_mapped_kb, mem.file_pmd_mapped_kb)),
        cmdline=cmdline.strip() if cmdline else None,
        cmdline_params=parse_cmdline(cmdline),
        sysctls={k: sr.read_int(p, quiet_missing=True) for k, p in SYSCTLS.items()},
        memlock_soft=soft, memlock_hard=hard,
        cpu_flags=flags,
        virtualization=virt, container=container,
        in_container=inside, container_evidence=evidence,
        hugetlbfs_mounts=read_mounts(sr),
        cgroup_hugetlb=cgroup_limits(sr, "self"),
        cgroup_hidden=hidden_ancestors(sr), hugetlb_accounting=hugetlb_accounting(sr),
        memory_limit=memory_limit(sr, "self"),
        buddy=read_buddyinfo(sr),
        vmstat=read_vmstat(sr),
        boot=boot,
        hostname=(sr.read("/proc/sys/kernel/hostname", quiet_missing=True) or "").strip() or None,
        notes=tuple(str(n) for n in sr.notes),
    )
