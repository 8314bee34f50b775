"""`hpadvise probe`: what a TLB miss costs on this host, and what huge pages can buy at most.

Method: one working set (by default the size of the planned buffers, capped by available
memory) is mapped once per page size the running kernel offers, in turn, and read at random,
8 bytes per access, the same random indexes for every variant:
- the base page (4 KiB on x86-64; 4, 16 or 64 KiB on arm64): anonymous memory with
  MADV_NOHUGEPAGE;
- THP at the kernel's PMD size (hpage_pmd_size: 2 MiB with a 4 KiB base page, 32 MiB with
  16 KiB, 512 MiB with 64 KiB): anonymous memory with MADV_HUGEPAGE (needs THP `enabled`
  madvise or always);
- each hugetlb size the kernel lists in /sys/kernel/mm/hugepages (on arm64 with a 4 KiB granule
  64 KiB, 2 MiB, 32 MiB and 1 GiB): MAP_HUGETLB with the size in the flags, from its static
  pool, grown for the probe and given back. A size above the buddy allocator's largest block
  (gigantic: 1 GiB on x86-64, 32 MiB and 1 GiB on arm64 with 4 KiB) comes from contiguous
  ranges at runtime, which the kernel may not find: such a variant says what it was granted.
Each variant's backing is checked in /proc/self/smaps before it counts. The reads are
independent (a gather, numpy.take), as index and buffer lookups are, so several misses are in
flight at once: the figure is a cost per access under memory-level parallelism, not a pure
latency. On a working set far beyond the TLB's reach nearly every 4 KiB access misses the TLB,
so the difference to 2 MiB pages is what a page walk costs here, less what the larger pages
still miss. On a virtual machine each walk is two-dimensional (guest and host tables), which
makes it larger than on bare metal.

What it says about a database: an upper bound of the gain for a workload of which a share m of
the accesses miss the TLB is m x (1 - t_huge / t_4k), that is if all of its time were such
accesses. Real workloads spend time elsewhere (CPU, I/O, locks), so validate measures the gain.
The MAP_* values are the kernel's uapi (include/uapi/asm-generic/mman-common.h, x86 mman.h:
MAP_HUGETLB 0x40000, MAP_HUGE_SHIFT 26).
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from ..kit.errors import InputError
from ..kit.paths import sysfs_pool
from ..kit.sizing import fmt_bytes, fmt_page
from .meminfo import read_meminfo
from .sysroot import SysRoot

MAP_HUGETLB = 0x40000
MAP_HUGE_SHIFT = 26
MiB, GiB = 1 << 20, 1 << 30


@dataclass
class Variant:
    name: str
    page_kb: int
    ns: float | None = None  # best run, ns per access
    runs: list[float] = field(default_factory=list)
    skipped: str | None = None
    backing: str | None = None  # what smaps showed
    counters: dict | None = None  # perf stat over its runs, where a PMU exists


@dataclass
class Result:
    size_bytes: int
    accesses: int
    variants: list[Variant]
    pmu: str  # "present" or why not
    counters: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def base(self) -> Variant | None:
        """The base page's variant (the first)."""
        return self.variants[0] if self.variants else None

    def saving_ns(self) -> float | None:
        """What a huge page saves per access here: the base page minus the best huge page
        variant."""
        base = self.base
        huge = [v.ns for v in self.variants[1:] if v.ns is not None]
        return None if base is None or base.ns is None or not huge else base.ns - min(huge)

    def by(self, name: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)

    def bound(self, miss_share: float) -> float | None:
        """Upper bound of the gain for a workload whose accesses miss the TLB `miss_share` of
        the time: m x (1 - t_huge / t_4k)."""
        base, s = self.base, self.saving_ns()
        if s is None or not base or not base.ns:
            return None
        return miss_share * s / base.ns


def pmu_state(root: str = "/") -> str:
    """"present" when the kernel exposes a CPU PMU (/sys/bus/event_source/devices/cpu, or
    cpu_core/cpu_atom on hybrid CPUs), else why dTLB counters cannot be had."""
    d = os.path.join(root, "sys/bus/event_source/devices")
    try:
        names = os.listdir(d)
    except OSError:
        return "no perf events in this kernel (no /sys/bus/event_source)"
    if any(n in ("cpu", "cpu_core", "cpu_atom") for n in names):
        return "present"
    return ("no PMU in this VM: the hypervisor exposes no hardware counters (perf has only "
            "software events), so dTLB misses and page-walk cycles cannot be counted here")


def _smaps_of(addr: int) -> dict[str, int]:
    """The smaps fields (kB) of our mapping that starts at `addr`."""
    out: dict[str, int] = {}
    mine = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and ":" not in head[0]:
                mine = int(head[0].split("-")[0], 16) == addr
                continue
            if mine and len(head) >= 2 and head[1].isdigit():
                out[head[0].rstrip(":")] = int(head[1])
    return out


def _address(mm: mmap.mmap) -> int:
    import ctypes
    return ctypes.addressof(ctypes.c_char.from_buffer(mm))


def grow_pool(kb: int, pages: int) -> tuple[int, int] | str:
    """Grow the pool by `pages`; (old nr, granted) or why not."""
    path = sysfs_pool(kb)
    if not os.path.exists(path):
        return f"no {fmt_bytes(kb * 1024)} pages in this kernel"
    if os.geteuid() != 0:
        return "the static pool can only be grown as root"
    old = int(open(path).read())
    try:
        with open(path, "w") as f:
            f.write(str(old + pages))
    except OSError as exc:
        return f"the kernel refused to grow the pool: {exc.strerror}"
    return old, int(open(path).read()) - old


def restore_pool(kb: int, old: int) -> None:
    with open(sysfs_pool(kb), "w") as f:
        f.write(str(old))


def _measure(v: Variant, mm: mmap.mmap, idx, runs: int, say, base: bool = False) -> None:
    import numpy as np
    arr = np.frombuffer(mm, dtype=np.uint64)
    arr.fill(1)  # touch every page: faults happen here, not in the timed reads
    sm = _smaps_of(_address(mm))
    if base:
        v.backing = f"AnonHugePages {sm.get('AnonHugePages', 0)} kB"
        if sm.get("AnonHugePages", 0):
            v.skipped = "THP took part of the base page mapping (MADV_NOHUGEPAGE ignored)"
            return
    elif v.name.endswith("THP"):
        share = sm.get("AnonHugePages", 0) / max(1, sm.get("Rss", 1))
        v.backing = f"AnonHugePages {sm.get('AnonHugePages', 0)} kB of {sm.get('Rss', 0)} kB"
        if share < 0.9:
            v.skipped = f"THP gave only {share:.0%} of the mapping huge pages"
            return
    else:
        v.backing = f"KernelPageSize {sm.get('KernelPageSize')} kB"
        if sm.get("KernelPageSize") != v.page_kb:
            v.skipped = f"the mapping is on {sm.get('KernelPageSize')} kB pages"
            return
    out = np.empty(len(idx), dtype=np.uint64)
    perf = _perf_attach() if pmu_state() == "present" else None
    for r in range(runs):
        say(f"{v.name}: run {r + 1}/{runs}")
        t0 = time.perf_counter()
        np.take(arr, idx, out=out)
        v.runs.append((time.perf_counter() - t0) * 1e9 / len(idx))
    v.counters = _perf_detach(perf)
    del arr
    v.ns = min(v.runs)


@dataclass(frozen=True)
class Geometry:
    """The page sizes of the running kernel, in kB (host.py reads them)."""
    base_kb: int
    thp_kb: int | None  # THP's PMD size; None without THP
    hugetlb_kb: tuple[int, ...]  # every size the kernel offers
    gigantic_kb: tuple[int, ...] = ()  # those above the buddy allocator's largest block


def variants_for(g: Geometry) -> list[Variant]:
    out = [Variant(fmt_page(g.base_kb), g.base_kb)]
    if g.thp_kb:
        out.append(Variant(f"{fmt_page(g.thp_kb)} THP", g.thp_kb))
    return out + [Variant(f"{fmt_page(kb)} hugetlb", kb) for kb in sorted(g.hugetlb_kb)]


class Pools:
    """How probe grows a static pool for a variant and gives it back: straight through sysfs
    here; the command line journals the same (cli/probing.py), so that a probe killed with a
    pool grown leaves it to `hpadvise rollback`."""

    def grow(self, kb: int, pages: int) -> tuple[int, int] | str:
        return grow_pool(kb, pages)

    def restore(self, kb: int, old: int) -> None:
        restore_pool(kb, old)


def run(size: int, accesses: int = 20_000_000, runs: int = 3,
        say: Callable[[str], None] = lambda m: None, geometry: Geometry | None = None,
        thp_enabled: str | None = None, pools: Pools | None = None) -> Result:
    try:
        import numpy as np
    except ImportError:
        raise InputError("probe needs numpy for its access loop, and this Python has none: "
                         "pip install 'hpadvise[probe]' into hpadvise's environment, or, for "
                         "hpadvise.pyz, the host's own (Debian/Ubuntu: apt-get install "
                         "python3-numpy; RHEL: dnf install python3-numpy)") from None
    g = geometry or Geometry(mmap.PAGESIZE // 1024, None, ())
    avail_kb = read_meminfo(SysRoot("/")).available_kb
    avail = avail_kb * 1024 if avail_kb is not None else None
    need = size + accesses * 16  # the mapping, the indexes and the output
    if size < 64 * MiB:
        raise InputError(f"--size {fmt_bytes(size)}: give at least 64 MiB (a working set far "
                         "beyond the TLB's reach)")
    if avail is not None and need > avail * 0.8:
        raise InputError(f"--size {fmt_bytes(size)} with {accesses} accesses needs "
                         f"{fmt_bytes(need)}, more than 80% of the {fmt_bytes(avail)} available: "
                         "give a smaller --size or --accesses")
    t_start = time.monotonic()
    # whole pages of the largest size that fits the working set, so that every variant maps it
    step = max([kb * 1024 for kb in (g.thp_kb or 0, *g.hugetlb_kb) if 0 < kb * 1024 <= size]
               or [mmap.PAGESIZE])
    size = -(-size // step) * step
    n = size // 8
    rng = np.random.default_rng(12345)
    idx = rng.integers(0, n, size=accesses, dtype=np.int64)
    variants = variants_for(g)
    pools = pools or Pools()
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    for v in variants:
        if avail is not None and v.page_kb * 1024 > max(size, avail * 0.8):
            v.skipped = (f"one {fmt_page(v.page_kb)} page is more than 80% of the "
                         f"{fmt_bytes(avail)} available")
            continue
        say(f"{v.name}: mapping {fmt_bytes(size)}")
        if v is variants[0] or v.name.endswith("THP"):
            if v is not variants[0] and thp_enabled == "never":
                v.skipped = "THP enabled is never on this host"
                continue
            mm = mmap.mmap(-1, size, flags=flags)
            mm.madvise(mmap.MADV_NOHUGEPAGE if v is variants[0] else mmap.MADV_HUGEPAGE)
            try:
                _measure(v, mm, idx, runs, say, base=v is variants[0])
            finally:
                mm.close()
        else:
            pages = -(-size // (v.page_kb * 1024))
            got = pools.grow(v.page_kb, pages)
            if isinstance(got, str):
                v.skipped = got
                continue
            old, granted = got
            try:
                if granted < pages:
                    v.skipped = (f"the kernel granted {granted} of {pages} pages at runtime"
                                 + (" (a gigantic size: contiguous ranges at runtime, or "
                                    "reserve them at boot)" if v.page_kb in g.gigantic_kb
                                    else " (reserve them at boot for this variant)"))
                    continue
                huge = MAP_HUGETLB | ((v.page_kb * 1024).bit_length() - 1) << MAP_HUGE_SHIFT
                try:
                    mm = mmap.mmap(-1, pages * v.page_kb * 1024, flags=flags | huge)
                except OSError as exc:
                    v.skipped = f"mmap(MAP_HUGETLB) failed: {exc.strerror}"
                    continue
                try:
                    _measure(v, mm, idx, runs, say)
                finally:
                    mm.close()
            finally:
                pools.restore(v.page_kb, old)
    return Result(size, accesses, variants, pmu_state(), seconds=time.monotonic() - t_start)


# ---- perf stat, where a PMU exists ----------------------------------------------------------

# perf's generic cache events, and Intel's page-walk cycle events where this CPU has them
# (perf rejects the whole command for an event name it does not know: tested first).
GENERIC_EVENTS = ("dTLB-load-misses", "dTLB-store-misses", "cycles")
WALK_EVENTS = ("dtlb_load_misses.walk_active", "dtlb_store_misses.walk_active")
DTLB_EVENTS = GENERIC_EVENTS + WALK_EVENTS


def dtlb_events() -> tuple[str, ...]:
    import subprocess
    try:
        # Only the exit status matters; perf 6.1 can print stray bytes after an unknown event's
        # name in its syntax error, so its output is not decoded at all.
        r = subprocess.run(["perf", "stat", "-x,", "-e", ",".join(WALK_EVENTS), "--", "true"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return GENERIC_EVENTS
    return DTLB_EVENTS if r.returncode == 0 else GENERIC_EVENTS


def _perf_attach():
    """`perf stat` on this process for the runs of one variant (None without perf)."""
    import shutil
    import subprocess
    import tempfile
    if not shutil.which("perf"):
        return None
    fd, path = tempfile.mkstemp(prefix="hpadvise-perf-", suffix=".csv")
    os.close(fd)
    p = subprocess.Popen(["perf", "stat", "-x,", "-o", path, "-e", ",".join(dtlb_events()), "-p",
                          str(os.getpid())], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(0.2)  # attached before the first run
    return p, path


def _perf_detach(perf) -> dict | None:
    if perf is None:
        return None
    import signal
    p, path = perf
    p.send_signal(signal.SIGINT)  # perf stat prints its counts when interrupted
    try:
        p.wait(timeout=10)
        with open(path, errors="replace") as f:
            return parse_perf_csv(f.read())
    except Exception:
        p.kill()
        return None
    finally:
        os.unlink(path)


def parse_perf_csv(text: str) -> dict[str, float | None]:
    """`perf stat -x,` output (perf-stat(1), "CSV FORMAT": counter value, unit, event name,
    run time, percentage of measurement time, ...): event -> value; None where perf printed
    "<not supported>" or "<not counted>"."""
    out: dict[str, float | None] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split(",")
        if len(f) < 3:
            continue
        value, event = f[0].strip(), f[2].strip()
        if not event:
            continue
        try:
            out[event] = float(value)
        except ValueError:
            out[event] = None
    return out


def to_json(res) -> dict:
    from dataclasses import asdict
    return {**asdict(res), "saving_ns": res.saving_ns(),
            "bound": {f"{m:g}": res.bound(m) for m in (0.01, 0.05, 0.1, 0.25, 1.0)}}


def render(res, runs: int) -> None:
    """`probe` for people: each variant's cost per access, the saving and its upper bound."""
    print(f"Working set {fmt_bytes(res.size_bytes)}, {res.accesses} random 8-byte reads per run, "
          f"best of {runs} ({res.seconds:.0f} s in all):")
    for v in res.variants:
        if v.ns is None:
            print(f"  {v.name:14} skipped: {v.skipped}")
        else:
            print(f"  {v.name:14} {v.ns:6.1f} ns per access   ({v.backing})")
    s = res.saving_ns()
    if s is not None:
        print(f"A huge page saves {s:.1f} ns per access that misses the TLB here "
              f"({s / res.base.ns:.0%} of a {res.base.name} access).")
        print("Upper bound of the gain for a workload whose accesses miss the TLB:")
        for m in (0.01, 0.05, 0.1, 0.25):
            print(f"  {m:>4.0%} of accesses -> at most {res.bound(m):.1%}")
        print("An upper bound: only if all of the workload's time were such accesses; "
              "`hpadvise validate` measures the real gain.")
    print(f"dTLB counters: {res.pmu}" if res.pmu != "present" else
          "dTLB counters: a PMU is present (validate and perf stat can count misses)")
