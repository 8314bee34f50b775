"""Which of a server's memory can get THP, and at which sizes: now, and under the plan.

A server's main process's mappings, from /proc/PID/smaps (Documentation/filesystems/proc.rst),
grouped by what decides their THP (Documentation/admin-guide/mm/transhuge.rst):
- private anonymous memory (the heap, malloc arenas, a JVM heap that is not a file) follows
  `enabled` and its per-size knobs;
- shared memory of the kernel's internal shmem mount (MAP_SHARED|MAP_ANONYMOUS, seen as
  /dev/zero; SysV segments; memfd_create files such as ZGC's heap) follows `shmem_enabled`
  and its per-size knobs. A tmpfs mount (/dev/shm) follows its own `huge=` option instead, and
  file mappings the page cache: neither is listed;
- static huge pages (hugetlb) are no THP matter: listed so the whole picture is there;
- a range the process madvise()d with MADV_HUGEPAGE (VmFlags "hg") gets THP under the
  madvise/advise modes too, one with MADV_NOHUGEPAGE ("nh") never; a process in THP mode
  `never` of its own gets none, in mode `advised` only its madvise()d ranges;
- a shmem file's pages are allocated once, through whichever mapping faults them: ZGC commits
  its heap's memfd through a temporary mapping it madvise()s and unmaps
  (ZPhysicalMemoryBacking::fallocate_compat_mmap_tmpfs in OpenJDK), so its heap views show
  no "hg" while they map PMD-sized pages. Shared memory on THP under a shmem mode that gives
  THP only to madvise()d ranges was madvise()d where it was allocated, and is counted so.

The sizes come from thp_rules.thp_sizes, the same decision the plan is made with; "planned"
applies the plan's THP changes (top-level and per-size knobs, the server's own mode) first.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..facts.procs import Mapping, parse_smaps
from ..facts.thp_rules import thp_sizes

if TYPE_CHECKING:
    from ..facts.thp_rules import THPFacts
    from ..api.model import Report

KINDS = ("anonymous", "shared", "hugetlb")
# paths of the internal shmem mount's mappings (proc.rst: a deleted file's name gets
# " (deleted)"; mm/shmem.c names shared anonymous mappings "dev/zero", SysV segments
# "SYSV<key>", memfd files "memfd:<name>")
_SHMEM_PREFIXES = ("/dev/zero", "/SYSV", "/memfd:", "[anon_shmem")
_ANON_NAMES = ("", "[heap]", "[stack]")


@dataclass(frozen=True)
class Region:
    """One kind of memory of a server's main process, summed over its mappings."""
    kind: str  # "anonymous" | "shared" | "hugetlb"
    advice: str  # "madvise" (MADV_HUGEPAGE), "nohuge" (MADV_NOHUGEPAGE) or "none"
    size_kb: int  # mapped (smaps Size)
    huge_kb: int  # on huge pages now: AnonHugePages, ShmemPmdMapped, or the hugetlb pages
    sizes_now: tuple[int, ...] = ()  # THP sizes (kB) it can get under the host's knobs now
    sizes_planned: tuple[int, ...] = ()  # ... once the plan is applied


def kind_of(m: Mapping) -> str | None:
    """What decides a mapping's huge pages; None for what no THP knob governs."""
    if m.hugetlb:
        return "hugetlb"
    if m.shared:
        return "shared" if m.path.startswith(_SHMEM_PREFIXES) else None
    if m.inode == 0 and (m.path in _ANON_NAMES or m.path.startswith("[anon:")):
        return "anonymous"
    return None


def read_regions(smaps: str, thp: THPFacts | None = None,
                 advised_paths: tuple[str, ...] = ()) -> tuple[Region, ...]:
    """A process's memory by kind and advice, sizes not decided yet. `thp`: the host's knobs
    now, which tell a shared mapping on THP whose pages were madvise()d elsewhere;
    `advised_paths`: the starts of mapping names its engine knows the server madvise()s
    where it allocates them (Instance.thp_advised)."""
    acc: dict[tuple[str, str], list[int]] = {}
    shmem_unadvised = thp is None or bool(thp_sizes(thp, "shmem_enabled", advised=False))
    maps = parse_smaps(smaps)
    # a shmem file is advised as a whole: every view of a file one view shows advised
    advised_files = {m.inode for m in maps if m.shared and m.inode and kind_of(m) == "shared"
                     and ("hg" in m.flags or (m.shmem_pmd_kb and not shmem_unadvised)
                          or (advised_paths and m.path.startswith(advised_paths)))}
    for m in maps:
        kind = kind_of(m)
        if kind is None:
            continue
        advice = "madvise" if "hg" in m.flags else "nohuge" if "nh" in m.flags else "none"
        if kind == "shared" and advice == "none" and m.inode in advised_files:
            advice = "madvise"
        if kind == "hugetlb":
            advice, huge = "none", m.shared_hugetlb_kb + m.private_hugetlb_kb
        else:
            huge = m.anon_huge_kb if kind == "anonymous" else m.shmem_pmd_kb
        a = acc.setdefault((kind, advice), [0, 0])
        a[0] += m.size_kb
        a[1] += huge
    return tuple(Region(k, adv, size, huge)
                 for (k, adv), (size, huge) in sorted(acc.items(),
                                                      key=lambda x: (KINDS.index(x[0][0]), x[0][1])))


def sizes(thp: THPFacts, region: Region, mode: str | None) -> tuple[int, ...]:
    """The THP sizes (kB) a region can get under these knobs in a process of this THP mode."""
    if region.kind == "hugetlb" or region.advice == "nohuge":
        return ()
    advised = region.advice == "madvise"
    if mode == "advised" and not advised:
        return ()
    return thp_sizes(thp, "enabled" if region.kind == "anonymous" else "shmem_enabled",
                     advised, prctl_off=mode == "never")


def planned_thp(thp: THPFacts, r: Report) -> THPFacts:
    """The host's THP knobs as the plan leaves them."""
    top, per_size = {}, {}
    for c in r.changes:
        k = c.id
        if c.kind != "thp" or k is None:
            continue
        if k.per_size:  # hugepages-<kB>kB/<knob>
            per_size.setdefault(k.page_kb, {})[k.file] = c.recommended
        elif k.file in ("enabled", "shmem_enabled"):
            top[k.file] = dataclasses.replace(getattr(thp, k.file), value=c.recommended)
    mthp = {kb: {**d, **per_size.get(kb, {})} for kb, d in thp.mthp.items()}
    return dataclasses.replace(thp, mthp=mthp, **top)


def attach(r: Report, smaps: dict[int, str]) -> None:
    """Each running instance's regions (from its main process's smaps, keyed by the
    instance object's id()), with the sizes each can get now and under the plan."""
    if not smaps:
        return
    after = planned_thp(r.host.thp, r)
    own = {c.instance: c.recommended for c in r.changes if c.kind == "process_thp"}
    for inst in r.instances:
        text = smaps.get(id(inst))
        if not text or not inst.running:
            continue
        mode_after = own.get(inst.id, inst.thp_mode)
        inst.thp_regions = tuple(
            dataclasses.replace(g, sizes_now=sizes(r.host.thp, g, inst.thp_mode),
                                sizes_planned=sizes(after, g, mode_after))
            for g in read_regions(text, r.host.thp, inst.thp_advised))
