"""THP enabled=always and a JVM's thread stacks, per JDK.

With THP enabled=always, khugepaged may fold thread stacks into huge pages before the JVM
places its guard pages; the huge pages then split, and the stack stays resident whole. The
JDK bug that describes it (JDK-8312182, "THPs cause huge RSS due to thread start timing
issue") measured 10,000 idle threads with -Xss2m at 300-600 MB RSS under madvise or never and
2-3 GB under always. It bites stacks of the THP size (2 MiB) or more: JDK-8303215 ("Make thread
stacks not use huge pages", JDK 21) stopped default stacks from being THP-aligned, and
JDK-8312182 added THPStackMitigation (JDK 22; backported to 21.0.x and 17.0.x updates, not to
11 in the builds tested here), which under always keeps glibc's guard page between stacks so
that adjacent stacks never form one huge-page-sized area.
"""

from __future__ import annotations

import mmap
import os
import re

from hpadvise.api.face import counted, fmt_bytes

# The JDK's default thread stack size per architecture (ThreadStackSize in
# src/hotspot/os_cpu/linux_*/globals_linux_*.hpp): 1 MiB on x86-64, 2 MiB on AArch64 (2040 KiB
# from JDK-8303215 on, in the same JDKs that carry the mitigation).
DEFAULT_STACK = {"x86_64": 1 << 20, "amd64": 1 << 20, "aarch64": 2 << 20}


def stack_mitigation(home: str | None) -> bool | None:
    """Whether this JDK has THPStackMitigation, read from its own libjvm.so, where every flag
    it knows is named (a vendor's backport counts as it should); None when unreadable."""
    if not home:
        return None
    for lib in ("lib/server/libjvm.so", "jre/lib/amd64/server/libjvm.so"):
        try:
            with open(os.path.join(home, lib), "rb") as fh, \
                    mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return m.find(b"THPStackMitigation") >= 0
        except (OSError, ValueError):
            continue
    return None


def read_release(home: str) -> str | None:
    """The JDK's `release` file (JAVA_VERSION, OS_ARCH ...), None when it has none."""
    try:
        with open(os.path.join(home, "release"), encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def stack_risk(stack: int | None, major: int | None, release: str | None, home: str | None,
               pmd_kb: int | None) -> str | None:
    """Evidence that THP enabled=always would page this JVM's thread stacks in whole, or None
    (stacks below the THP size, a JDK with the mitigation, or nothing known). `release` is the
    text of the JDK's `release` file (OS_ARCH names its architecture)."""
    arch = re.search(r'OS_ARCH="([^"]+)"', release or "")
    size = stack or DEFAULT_STACK.get(arch.group(1) if arch else "x86_64")
    if not pmd_kb or not size or size < pmd_kb * 1024:
        return None
    if stack_mitigation(home) is not False:
        return None
    how = f"-Xss {fmt_bytes(stack)}" if stack else f"the default {fmt_bytes(size)}"
    return (f"thread stacks {how} >= the THP size {fmt_bytes(pmd_kb * 1024)}; JDK "
            f"{major or '(release unknown)'} at {home} has no THPStackMitigation (its libjvm.so)")


# ---- the heap's own mapping on THP -----------------------------------------------------------
# ZGC (JDK 15+) maps its heap from a memfd named "java_heap" (ZPhysicalMemoryBacking_linux.cpp,
# memfd_create(ZFILENAME_HEAP)): shared memory, on THP only through shmem_enabled, and counted
# in smaps as ShmemPmdMapped once per view (JDK 17's ZGC maps it three times). The other
# collectors reserve the heap as one range of private anonymous memory (ReservedHeapSpace),
# split by smaps into VMAs as it is committed, with the CDS archive's heap objects (classes.jsa)
# mapped inside it (JDK 12+): AnonHugePages, under `enabled`.
HEAP_MEMFD = "/memfd:java_heap"  # as smaps names it (proc.rst: memfd files are "/memfd:NAME")
def heap_on_thp(maps, gc: str | None, heap_bytes: int) -> tuple[str, int | None, str]:
    """(knob that governs the heap, THP kB in the heap's mappings or None when they are not
    found, evidence)."""
    if gc == "Z":
        heap = [m for m in maps if m.shared and m.path.startswith(HEAP_MEMFD)]
        kb = sum(m.shmem_pmd_kb for m in heap)
        return "shmem_enabled", (kb if heap else None), (
            f"smaps of the heap's memfd (java_heap, {counted(len(heap), 'mapping')}): ShmemPmdMapped "
            f"{fmt_bytes(kb * 1024)}" if heap else "no java_heap memfd mapping in smaps")
    runs: list[list] = []  # adjacent private mappings of the heap's kinds: candidate heaps
    for m in sorted((m for m in maps if not m.shared and (not m.path or m.path.endswith(".jsa"))),
                    key=lambda m: m.start):
        if runs and runs[-1][-1].end == m.start:
            runs[-1].append(m)
        else:
            runs.append([m])

    def size(r: list) -> int:
        return sum(m.size_kb for m in r) * 1024
    fits = [r for r in runs if size(r) >= heap_bytes // 2 and any(not m.path for m in r)]
    if not fits:
        return "enabled", None, "no anonymous range of the heap's size in smaps"
    run = min(fits, key=lambda r: abs(size(r) - heap_bytes))  # the reservation is -Xmx
    kb = sum(m.anon_huge_kb for m in run if not m.path)
    return "enabled", kb, (f"smaps of the heap's range {run[0].start:x}-{run[-1].end:x}: "
                           f"AnonHugePages {fmt_bytes(kb * 1024)}")


def g1_madvise_bug(release: str | None, gc: str | None, enabled: str | None) -> str | None:
    """Why a JDK 25.0.0 G1 heap stays off THP under enabled = madvise, or None. JDK-8366434:
    after the reservation rework of JDK-8345655, G1 reserved its heap with the base page size,
    so -XX:+UseTransparentHugePages never madvise()d it; `always` is unaffected. Fixed in
    mainline (openjdk/jdk PR 27051, September 2025) and backported to the 25 updates
    (openjdk/jdk25u PR 211), so only the first 25 release (JAVA_VERSION "25" or "25.0.0")
    is held to it here."""
    mt = re.search(r'JAVA_VERSION="([\d.]+)"', release or "")
    if gc != "G1" or enabled != "madvise" or not mt or mt.group(1) not in ("25", "25.0.0"):
        return None
    return ("JDK 25.0.0's G1 reserves its heap without THP under enabled = madvise "
            "(JDK-8366434): update the JDK to a later 25 update; enabled = always also works "
            "around it")
