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

from hpadvise.engines import Demand, Engine, Finding, Instance, Targets
from hpadvise.host import HostFacts
from hpadvise.findings import Code, Codes
from hpadvise.procs import ProcTable, backing_of
from hpadvise.profiles import Profile
from hpadvise.sizing import fmt_bytes, fmt_page, pages_for

DOCS = "libvirt Domain XML, Memory Backing; QEMU -m / memory-backend-file"
CODES = Codes(
    Code("qemu.hugepages.active", "ok", "Guest RAM on huge pages", DOCS),
    Code("qemu.hugepages.none", "info", "Guest RAM on normal pages", DOCS),
)
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
                            owner=procs.user(p.uid),
                            settings={"guest_ram": fmt_bytes(sum(mems)) if mems else None,
                                      "hugepages_backing": huge})
            maps = p.smaps
            hugetlb_kb = 0
            if maps is not None:
                b = backing_of(maps, host.thp.pmd_size_kb, host.base_page_bytes // 1024)
                inst.backing, inst.backing_page_kb, hugetlb_kb = b.kind, b.page_kb, b.hugetlb_kb
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

    def findings(self, inst: Instance, host: HostFacts, profile: Profile) -> list[Finding]:
        if inst.backing == "hugetlb":
            return [CODES["qemu.hugepages.active"](
                "Backed by the static pool.", "smaps: hugetlb mappings", inst.id,
                title=f"Guest RAM on {fmt_page(inst.backing_page_kb)} pages")]
        return [CODES["qemu.hugepages.none"](
            "Add <memoryBacking><hugepages><page size='1' unit='G'/></hugepages>"
            "</memoryBacking> to the domain (or -object memory-backend-file with mem-path on "
            "hugetlbfs); the pool below includes this guest.",
            inst.settings.get("guest_ram") or "", inst.id)]
