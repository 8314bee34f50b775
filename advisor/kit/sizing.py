"""Sizes and page arithmetic: demand in bytes -> pages, pools, and what they cost the OS."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import InputError
from .knob_id import size_dir

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_bytes(text: str | int, what: str = "size") -> int:
    """'2GiB', '512MB', '1g', 4096 -> bytes. Units are binary, as in PostgreSQL and the kernel."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise InputError(f"{what}: {text} is negative; give a size such as 2GiB")
        return text
    mt = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    if not mt or mt.group(2).lower() not in _UNITS:
        raise InputError(f"{what}: {text!r} is not a size; write it like 512MiB or 2GiB")
    return int(float(mt.group(1)) * _UNITS[mt.group(2).lower()])


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 instance', '2 instances': a count with its noun in the number it takes."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            v = n / size
            return f"{v:.1f} {unit}" if v < 100 and v != int(v) else f"{int(round(v))} {unit}"
    return f"{n} B"


# The x86-64 gigantic page: 1 GiB in kB (Documentation/admin-guide/mm/hugetlbpage.rst).
GIB_KB = 1048576


def fmt_page(size_kb: int) -> str:
    """A page size for people: "2 MiB", "1 GiB"."""
    return "1 GiB" if size_kb == GIB_KB else fmt_bytes(size_kb * 1024).replace(".0 ", " ")


def cmdline_size(size_kb: int) -> str:
    """A page size as the kernel command line writes it (hugepagesz=64K, 2M, 32M, 1G, 16G;
    memparse's suffixes, Documentation/admin-guide/kernel-parameters.txt)."""
    if size_kb % GIB_KB == 0:
        return f"{size_kb // GIB_KB}G"
    return f"{size_kb // 1024}M" if size_kb % 1024 == 0 else f"{size_kb}K"


_MEMPARSE = re.compile(r"(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)([kKmMgGtTpPeE]?)")


def memparse(text: str) -> int:
    """Bytes from the start of a kernel parameter's size as lib/cmdline.c memparse() reads
    it: a number in base 0 (0x hex, a leading 0 octal, else decimal), then one of K M G T P
    E (either case) as a power of 1024; whatever follows is not looked at. No number: 0."""
    mt = _MEMPARSE.match(text)
    if not mt:
        return 0
    num, suffix = mt.groups()
    n = int(num, 16) if num[:2] in ("0x", "0X") else int(num, 8) if num[0] == "0" else int(num)
    return n * 1024 ** " KMGTPE".index(suffix.upper() or " ")


def cmdline_kb(text: str) -> int | None:
    """The other way: hugepagesz= values 64K, 2M, 1G, 2048K, or bytes (memparse's K, M, G
    suffixes), in kB; None for anything else."""
    mt = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not mt:
        return None
    n = int(mt.group(1))
    return {"": n // 1024, "K": n, "M": n * 1024, "G": n * 1048576}[mt.group(2)]


def pool_label(size_kb: int) -> str:
    """The short name users know a pool by: "hugepages-2048kB/nr_hugepages"."""
    return f"{size_dir(size_kb)}/nr_hugepages"


def pages_for(nbytes: int, page_bytes: int) -> int:
    """Whole pages holding `nbytes`: a mapping is rounded up to the page size (exact integer
    arithmetic; any unit, as long as both are in the same one)."""
    return -(-nbytes // page_bytes)


def commit_limit_kb(mem_total_kb: int, hugetlb_kb: int, ratio: int, swap_kb: int,
                    overcommit_kbytes: int = 0) -> int:
    """CommitLimit as mm/util.c vm_commit_limit() computes it: huge pages are excluded from the
    RAM that can be committed ((RAM - hugetlb) * ratio / 100 + swap, or overcommit_kbytes +
    swap when that is set). Documentation/mm/overcommit-accounting.rst."""
    if overcommit_kbytes:
        return overcommit_kbytes + swap_kb
    return (mem_total_kb - hugetlb_kb) * ratio // 100 + swap_kb


# A planned pool on this host: settable now; the memory is there but a runtime allocation
# cannot be relied on (1 GiB pages, or free memory too fragmented), so it is reserved at boot;
# or the pools would leave the OS less than the profile's floor.
FEASIBILITY = ("fits", "boot_reservation", "does_not_fit")


@dataclass(frozen=True)
class PoolPlan:
    size_kb: int
    current_pages: int | None
    demand_pages: int  # sum over the instances that use this size
    headroom_pages: int
    foreign_pages: int  # pages held or reserved by processes hpadvise does not manage
    instances: tuple[str, ...]
    # NUMA: (node, pages) when the pool is planned per node (instances bound to nodes);
    # empty = one global pool the kernel spreads over the nodes.
    per_node: tuple[tuple[int, int], ...] = ()
    # Whether the host can hold it: one of FEASIBILITY, and why (planning/feasible.py decides).
    feasibility: str = "fits"
    feasibility_reason: str = ""

    @property
    def target_pages(self) -> int:
        return self.demand_pages + self.headroom_pages + self.foreign_pages

    @property
    def target_bytes(self) -> int:
        return self.target_pages * self.size_kb * 1024


def spread(pages: int, nodes: tuple[int, ...]) -> dict[int, int]:
    """Pages split over nodes as the kernel's global nr_hugepages write does (round-robin over
    the nodes with memory, hugetlbpage.rst "Interaction of Task Memory Policy"): lower nodes
    get the remainder."""
    n = len(nodes)
    return {node: pages // n + (1 if i < pages % n else 0) for i, node in enumerate(nodes)}


def headrooms(demand: dict[int, int], pct: float, min_pages: int,
              gigantic) -> dict[int, int]:
    """Headroom per pool (page size kB -> pages), reckoned in bytes: pct of each pool's demand.
    A gigantic size (`gigantic(kb)`, HostFacts.is_gigantic) takes only the whole pages that
    share reaches, and hands the rest down to the next smaller planned size, which rounds up:
    rounding 1% of a 1 GiB heap up to a 1 GiB page would double its pool. The profile's
    pool.headroom_pct and headroom_min_pages (profiles/*.toml say why 1%) apply to every size."""
    out: dict[int, int] = {}
    rest_bytes = 0.0  # what a larger, gigantic size left to this one
    for kb in sorted(demand, reverse=True):
        pages = demand[kb]
        if pages == 0 and not rest_bytes:
            out[kb] = 0
            continue
        # in this size's pages; the old per-pool count when nothing is handed down
        want = pages * pct / 100 + rest_bytes / (kb * 1024)
        if gigantic(kb):
            n = math.floor(want + 1e-9)  # 1% of 300 pages is 3, whatever the float says
            rest_bytes = max(0, round((want - n) * kb * 1024))
        else:
            n, rest_bytes = math.ceil(want), 0.0
        out[kb] = max(min_pages, n) if pages else n
    return out


def k8s_quantity(nbytes: int) -> str:
    """A Kubernetes quantity in the largest binary unit that divides it."""
    for unit, n in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if nbytes % n == 0:
            return f"{nbytes // n}{unit}"
    return str(nbytes)


def k8s_resource(page_kb: int) -> str:
    return f"hugepages-{k8s_quantity(page_kb * 1024)}"
