"""QEMU/KVM guests: guest RAM on static huge pages, as libvirt's
<memoryBacking><hugepages><page size='1' unit='G'/></hugepages></memoryBacking> does
(libvirt docs, Domain XML format, "Memory Backing"; QEMU docs, -m and memory-backend-file).

A guest's demand is its RAM (-m, or the sizes of its memory-backend objects), rounded up to the
page size per backend; the page size is selectable (libvirt picks it per domain), so the plan
may choose 1 GiB pages (profile kvm-host prefers them). Whether the guest runs on huge pages:
smaps (hugetlb mappings of the guest RAM size).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpadvise.api.face import (Code, Codes, Demand, Engine, Finding, HostFacts, Instance,
                               ProcTable, Profile, Targets, backing_of, fmt_bytes, fmt_page,
                               pages_for)

DOCS = "libvirt Domain XML, Memory Backing; QEMU -m / memory-backend-file"
CODES = Codes(
    Code("qemu.hugepages.active", "ok", "Guest RAM on huge pages", DOCS),
    Code("qemu.hugepages.none", "info", "Guest RAM on normal pages", DOCS),
    Code("qemu.hugepages.short", "crit", "The pool cannot hold the guest RAM mapped on "
         "hugetlbfs", "QEMU docs, memory-backend-file reserve= and prealloc=; "
         "Documentation/admin-guide/mm/hugetlbpage.rst (MAP_NORESERVE)"),
)


@dataclass(frozen=True)
class Guest:
    """What the QEMU engine keeps of a guest for its findings (Instance.state)."""
    mapped_hugetlb_kb: int  # guest RAM mapped on hugetlbfs, faulted or not (smaps Size)


_UNIT = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}  # -m: MiB default


def qemu_size(text: str, default_unit: str = "m") -> int | None:
    mt = re.fullmatch(r"(\d+)([kKmMgGtT]?)[bB]?", text.strip())
    if not mt:
        return None
    return int(mt.group(1)) * _UNIT[(mt.group(2) or default_unit).lower()]


def guest_memory(argv: tuple[str, ...]) -> tuple[list[int], bool, str | None]:
    """(RAM per memory backend in bytes, backed by hugetlbfs?, guest name) from QEMU's argv."""
    name = None
    ram: list[int] = []
    backends: list[int] = []
    huge = False
    for n, a in enumerate(argv[:-1]):
        v = argv[n + 1]
        if a == "-m":
            size = v.split(",")[0]
            size = size.split("=", 1)[1] if size.startswith("size=") else size
            s = qemu_size(size)
            if s:
                ram = [s]
        elif a == "-object" and v.startswith(("memory-backend-file", "memory-backend-memfd",
                                              "memory-backend-ram")):
            opts = dict(kv.split("=", 1) for kv in v.split(",")[1:] if "=" in kv)
            s = qemu_size(opts.get("size", ""), "b")
            if s:
                backends.append(s)
            if "hugepages" in opts.get("mem-path", "") or opts.get("hugetlb") == "on":
                huge = True
        elif a == "-mem-path" and "huge" in v:
            huge = True
        elif a == "-name":
            name = v.split(",")[0].replace("guest=", "")
    return (backends or ram), huge, name


class QemuEngine(Engine):
    """QEMU/KVM guests: guest RAM on static pages of a selectable size (1 GiB with the
    kvm-host profile); smaps tells whether a guest runs on them."""
    name = "qemu"
    description = "QEMU/KVM guests (guest RAM on 2 MiB or 1 GiB static pages)"
    process_names = ("qemu-system-x86", "qemu-kvm", "qemu-system-aarch64")
    codes = CODES

    def discover(self, host: HostFacts, procs: ProcTable, targets: Targets) -> list[Instance]:
        out = []
        for p in procs.all:
            comm = p.comm or ""
            if not (comm.startswith("qemu-system") or comm == "qemu-kvm"):
                continue
            argv = p.cmdline
            if not argv:
                continue
            mems, huge, name = guest_memory(argv)
            iid = f"qemu:{name or p.pid}"
            inst = Instance(self.name, iid, f"guest {name or '?'} (pid {p.pid})", True, pid=p.pid,
                            owner=procs.owner(p),
                            settings={"guest_ram": fmt_bytes(sum(mems)) if mems else None,
                                      "hugepages_backing": huge})
            maps = p.smaps
            hugetlb_kb = 0
            if maps is not None:
                b = backing_of(maps, host.thp.pmd_size_kb, host.base_page_bytes // 1024)
                inst.backing, inst.backing_page_kb, hugetlb_kb = b.kind, b.page_kb, b.hugetlb_kb
                # what its hugetlb mappings hold now (faulted); the rest is mapped only
                hugetlb_kb = sum(m.shared_hugetlb_kb + m.private_hugetlb_kb for m in maps
                                 if m.hugetlb)
                inst.state = Guest(b.hugetlb_kb)
            if mems:
                sizes = sorted(set(host.page_sizes_kb) | {host.default_hugepage_kb or 2048})
                pages = {kb: sum(pages_for(m, kb * 1024) for m in mems) for kb in sizes}
                page_kb = inst.backing_page_kb if inst.backing == "hugetlb" else \
                    (host.default_hugepage_kb or 2048)
                held = pages_for(hugetlb_kb, page_kb)
                inst.demand = Demand(iid, sum(mems), page_kb, pages, True,
                                     "guest RAM from -m / memory-backend objects",
                                     selectable=True, held_pages=held)
            out.append(inst)
        return out

    def outlives_process(self, inst: Instance) -> bool:
        return inst.id != f"qemu:{inst.pid}"  # a guest without -name is known by its PID

    def findings(self, inst: Instance, host: HostFacts, profile: Profile) -> list[Finding]:
        if inst.backing == "hugetlb":
            page = inst.backing_page_kb
            mapped_kb = inst.state.mapped_hugetlb_kb if isinstance(inst.state, Guest) else 0
            mapped = pages_for(mapped_kb * 1024, page * 1024)
            held = inst.demand.held_pages if inst.demand else 0
            pool = next((p for p in host.pools if p.size_kb == page), None)
            free = pool.free_pages if pool and pool.free_pages is not None else 0
            if mapped - held > free:
                # Not yet faulted pages come from the pool's free pages when the guest first
                # touches them; without a reservation (reserve=off, MAP_NORESERVE) a touch
                # that finds none kills the guest with SIGBUS (hugetlbpage.rst).
                return [CODES["qemu.hugepages.short"](
                    f"The guest maps {mapped} pages of {fmt_page(page)} on hugetlbfs and holds "
                    f"{held}; the pool has {free} free, so touching the rest kills it with "
                    f"SIGBUS. Grow the pool by {mapped - held - free} pages, or start it with "
                    "prealloc=on so that a short pool fails at start instead.",
                    f"smaps: {mapped} x {fmt_page(page)} mapped, {held} faulted; pool free "
                    f"{free}", inst.id, title=f"{inst.id}: the pool is {mapped - held - free} "
                    f"{fmt_page(page)} pages short of its RAM")]
            every = "every page of its RAM is on them" if held >= mapped else \
                f"{held} of {mapped} pages touched so far, the pool holds the rest"
            return [CODES["qemu.hugepages.active"](
                f"Backed by the static pool: {every}.",
                f"smaps: {mapped} x {fmt_page(page)} mapped, {held} held", inst.id,
                title=f"Guest RAM on {fmt_page(page)} pages ({held} of {mapped} in use)")]
        n1g = (inst.demand.pages.get(1048576) if inst.demand else None)
        boot = f" hugepagesz=1G hugepages={n1g} on the host's kernel command line reserves " \
            "them at boot, where 1 GiB pages are certain to be had;" if n1g else ""
        return [CODES["qemu.hugepages.none"](
            "Add <memoryBacking><hugepages><page size='1' unit='G'/></hugepages>"
            "</memoryBacking> to the domain (or -object memory-backend-file with mem-path on a "
            "1 GiB hugetlbfs mount and prealloc=on);" + boot + " the pool below includes this "
            "guest." + (" THP backs part of its RAM now, which the host may split or compact "
                        "at any time." if inst.backing == "thp" else ""),
            inst.settings.get("guest_ram") or "", inst.id,
            title="Guest RAM on " + ("THP" if inst.backing == "thp" else "normal pages"))]
