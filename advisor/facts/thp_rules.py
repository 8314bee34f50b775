"""THP as the kernel decides it for one mapping: per page size, per kind of memory, per
process (Documentation/admin-guide/mm/transhuge.rst):
- anonymous memory follows `enabled`, shared memory (memfd, SysV, MAP_SHARED|MAP_ANONYMOUS:
  the kernel's internal shmem mount) follows `shmem_enabled`;
- since 6.8 (anonymous) and 6.11 (shmem) each THP size has its own knob,
  hugepages-<size>kB/enabled and .../shmem_enabled; a size at `inherit` follows the top-level
  knob, any other value is that size's mode whatever the top level says. Fresh kernels have
  the PMD size at `inherit` and the others at `never`;
- a process that called prctl(PR_SET_THP_DISABLE) shows `THP_enabled: 0` in /proc/PID/status
  (Documentation/filesystems/proc.rst) and gets no THP at all.

These are the host's facts as rules: check (which sizes a region can get), the plan
(thp_policy.py) and the engines read them from here."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..kit.knob_id import read_choice
from ..kit.paths import THP_DIR as THP
from .sysroot import Note, SysRoot, size_dirs

@dataclass(frozen=True)
class Knob:
    """A sysfs "choice" file such as 'always [madvise] never'."""
    value: str | None
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class THPFacts:
    enabled: Knob
    defrag: Knob
    shmem_enabled: Knob
    khugepaged: dict[str, int | None]
    pmd_size_kb: int | None
    mthp: dict[int, dict[str, str | None]]  # size_kb -> {"enabled": .., "shmem_enabled": ..}


def parse_knob(text: str | None) -> Knob:
    if text is None:
        return Knob(None)
    c = read_choice(text)
    return Knob(c.chosen, c.words)


def read_thp(sr: SysRoot) -> THPFacts:
    def rd(name: str) -> str | None:
        return sr.read(f"{THP}/{name}", quiet_missing=True)

    kh = {k: sr.read_int(f"{THP}/khugepaged/{k}", quiet_missing=True)
          for k in ("defrag", "max_ptes_none", "pages_to_scan")}
    mthp: dict[int, dict[str, str | None]] = {}
    for size_kb, d in size_dirs(sr, THP):
        mthp[size_kb] = {
            k: parse_knob(sr.read(f"{d}/{k}", quiet_missing=True)).value
            for k in ("enabled", "shmem_enabled")
        }
    pmd = sr.read_int(f"{THP}/hpage_pmd_size", quiet_missing=True)
    if not sr.exists(THP):
        sr.notes.append(Note(THP, "missing: kernel without THP, or /sys not mounted"))
    return THPFacts(parse_knob(rd("enabled")), parse_knob(rd("defrag")),
                    parse_knob(rd("shmem_enabled")), kh, pmd // 1024 if pmd else None, mthp)


# How much THP each mode gives, per knob (transhuge.rst): `madvise`/`advise` only to ranges
# that asked with madvise(MADV_HUGEPAGE); `within_size` only inside i_size; `deny` is `never`
# for every mount, `force` is `always` for every mount (top-level shmem_enabled only).
RANK = {"enabled": {"never": 0, "madvise": 1, "always": 2},
        "shmem_enabled": {"deny": 0, "never": 0, "advise": 1, "within_size": 2, "always": 3,
                          "force": 4}}
# the modes under which a madvise()d range gets THP
ADVISED = {"enabled": ("madvise", "always"),
           "shmem_enabled": ("advise", "within_size", "always", "force")}


def effective(thp: THPFacts, knob: str) -> dict[int, str]:
    """Each THP size's mode for `knob` ("enabled": anonymous, "shmem_enabled": shared memory):
    its own value, or the top level's where it is `inherit`. A kernel without per-size knobs
    (before 6.8) has one size, the PMD size, under the top-level knob."""
    top = getattr(thp, knob).value
    out = {kb: top if d.get(knob) == "inherit" else d.get(knob)
           for kb, d in thp.mthp.items() if d.get(knob) is not None}
    if not any(d.get(knob) is not None for d in thp.mthp.values()) and thp.pmd_size_kb:
        out[thp.pmd_size_kb] = top
    return {kb: v for kb, v in sorted(out.items()) if v is not None}


def thp_sizes(thp: THPFacts, knob: str, advised: bool, prctl_off: bool = False) -> tuple[int, ...]:
    """The THP sizes (kB) a region can get: anonymous (`enabled`) or shared (`shmem_enabled`),
    madvise()d or not, in a process that switched THP off for itself (prctl) or not."""
    if prctl_off:
        return ()
    return tuple(kb for kb, mode in effective(thp, knob).items()
                 if mode in (ADVISED[knob] if advised else ("always", "force")))


# ---- who uses shared-memory THP now ---------------------------------------------------------


@dataclass(frozen=True)
class ThpUser:
    """A process with PMD-mapped THP of shared or file memory (smaps_rollup, proc.rst)."""
    pid: int
    comm: str
    shmem_pmd_kb: int
    file_pmd_kb: int


_FIELD = re.compile(r"^(ShmemPmdMapped|FilePmdMapped):\s+(\d+) kB", re.M)


def read_thp_users(sr: SysRoot, pmd_mapped_kb: tuple[int | None, ...]
                   ) -> tuple[ThpUser, ...]:
    """Processes whose shared or file mappings sit on PMD-mapped THP now. Only looked for when
    /proc/meminfo's ShmemPmdMapped or FilePmdMapped (`pmd_mapped_kb`, as host.read_meminfo
    read them) says someone does (smaps_rollup walks a process's page tables; proc.rst)."""
    if not any(pmd_mapped_kb):
        return ()
    out = []
    for name in sr.listdir("/proc"):
        if not name.isdigit():
            continue
        text = sr.read(f"/proc/{name}/smaps_rollup", quiet_missing=True)
        f = {k: int(v) for k, v in _FIELD.findall(text or "")}
        if any(f.values()):
            comm = (sr.read(f"/proc/{name}/comm", quiet_missing=True)
                    or "name unreadable").strip()
            out.append(ThpUser(int(name), comm, f.get("ShmemPmdMapped", 0),
                               f.get("FilePmdMapped", 0)))
    return tuple(sorted(out, key=lambda u: u.pid))


