"""The three top-level THP files under /sys/kernel/mm/transparent_hugepage, each declared once,
as data: the words the kernel takes (a profile's `[thp]` values besides "keep"), the plan's
order of preference among them, why the plan sets it, the kernel's default and its source,
the kernel parameter and TuneD option that set it at boot, and its finding.

Their identity is kit/knob_id.py's (`KnobId.thp(file)`); their values are read with its one
parser of the choice format. The profile schema, the plan's THP resolution
(planning/host_findings.py), the boot reader, persistence (the kernel command line, TuneD's
child profile), the metrics and the host table read these declarations; none spells a file's
words or defaults again.

The per-size files (hugepages-<kB>kB/enabled and .../shmem_enabled, SIZES) are declared here
too: their words, the kernel's default for the PMD size and for every other size, and the
kernel parameter that sets them at boot, with its one parser. How a mode is decided for a
mapping from them is thp_rules.py's.
"""

from __future__ import annotations


import re
from typing import NamedTuple

from ..kit.findings import Code, Codes
from ..kit.knob_id import SIZE_FILES, THP_FILES, KnobId
from ..kit.sizing import memparse
from .sysroot import SysRoot
from .thp_rules import THPFacts, read_thp

TRANSHUGE = "Documentation/admin-guide/mm/transhuge.rst"


class ThpFile(NamedTuple):
    file: str  # under transparent_hugepage/
    words: tuple[str, ...]  # the kernel's choices (transhuge.rst, "Global THP controls")
    prefer: tuple[str, ...]  # the plan's order when the profile's value does not suit all
    why: str
    default: str | None  # None: the kernel's build configuration decides (boot.py reads it)
    default_source: str
    config: str | None  # the build options' prefix that can choose another default (mm/Kconfig)
    cmdline: str | None  # the kernel parameter that sets it at boot (kernel-parameters.txt)
    tuned: tuple[str, ...]  # its options in TuneD's [vm] plugin (tuned.conf(5))
    code: Code
    since: tuple[int, int] | None = None  # the first kernel that takes `cmdline`
    tuned_since: tuple[int, int] | None = None  # the first TuneD that takes `tuned`
    # TuneD leaves the file alone where the kernel command line has `cmdline`
    tuned_yields: bool = False

    @property
    def profile_values(self) -> tuple[str, ...]:
        return (*self.words, "keep")

    def takes_cmdline(self, kernel: tuple[int, int] | None) -> bool:
        """Whether a kernel of this version sets the file from `cmdline` (an older one logs
        it as unknown and passes it to init); an unknown version is taken to."""
        return self.cmdline is not None and takes(kernel, self.since)

    def tuned_by(self, version: tuple[int, int] | None, cmdline: str) -> bool:
        """Whether TuneD of this version sets the file from its [vm] options (an older one
        logs them as unknown) at a boot with this kernel command line."""
        return takes(version, self.tuned_since) and not (
            self.tuned_yields and f"{self.cmdline}=" in cmdline)


def takes(kernel: tuple[int, int] | None, since: tuple[int, int] | None) -> bool:
    """Whether a kernel of this version has what came in `since` (either unknown: taken to)."""
    return kernel is None or since is None or kernel >= since


def kernel_version(release: str | None) -> tuple[int, int] | None:
    """(major, minor) of a kernel release as /proc/sys/kernel/osrelease gives it."""
    mt = re.match(r"(\d+)\.(\d+)", release or "")
    return (int(mt.group(1)), int(mt.group(2))) if mt else None


CODES = Codes(*(Code(f"thp.{f}", "info", f"THP {f} differs from the profile", TRANSHUGE,
                     ("warn",)) for f in THP_FILES))

# When the profile's value does not suit an instance, the value chosen among those every
# instance accepts, in `prefer` order: madvise serves a JVM's or MongoDB's madvise() while
# leaving everything else on small pages (transhuge.rst).
THP: dict[str, ThpFile] = {t.file: t for t in (
    ThpFile("enabled", ("always", "madvise", "never"), ("madvise", "never", "always"),
            "governs private anonymous memory; with madvise only processes that ask for THP "
            "get it (transhuge.rst), and Redis logs a latency warning at start when it is "
            "always", None, "CONFIG_TRANSPARENT_HUGEPAGE_ALWAYS / _MADVISE / _NEVER, mm/Kconfig",
            "CONFIG_TRANSPARENT_HUGEPAGE_", "transparent_hugepage",
            ("transparent_hugepages", "transparent_hugepage"),
            CODES["thp.enabled"],
            # TuneD's plugin_vm.py: the value is ignored where /proc/cmdline holds
            # transparent_hugepage=
            tuned_yields=True),
    ThpFile("defrag", ("always", "defer", "defer+madvise", "madvise", "never"),
            ("madvise", "defer+madvise", "defer", "never", "always"),
            "with madvise only processes that asked for THP stall in direct compaction",
            "madvise", "mm/huge_memory.c", None, None, ("transparent_hugepage.defrag",),
            CODES["thp.defrag"], tuned_since=(2, 11)),  # TuneD 2.11.0 added the option
    ThpFile("shmem_enabled", ("always", "within_size", "advise", "never", "deny", "force"),
            ("never", "advise", "within_size", "always", "deny", "force"),
            "governs shared anonymous memory, i.e. PostgreSQL's shared buffers when they are "
            "not on static huge pages", "never", "mm/shmem.c",
            "CONFIG_TRANSPARENT_HUGEPAGE_SHMEM_HUGE_", "transparent_hugepage_shmem", (),
            CODES["thp.shmem_enabled"], (6, 13)),  # transparent_hugepage_shmem=: see SIZES
)}
assert tuple(THP) == THP_FILES  # the identities knob_id.py gives them, in the same order


class SizeFile(NamedTuple):
    """A per-size THP file, transparent_hugepage/hugepages-<kB>kB/<file> (transhuge.rst:
    anonymous memory since Linux 6.8, shared memory since 6.11)."""
    file: str
    words: tuple[str, ...]  # the kernel's choices; `inherit` follows the top-level file
    pmd_default: str  # the PMD size's value when the kernel parameter is not given
    default_source: str
    cmdline: str  # the kernel parameter that sets the sizes at boot (kernel-parameters.txt)
    since: tuple[int, int]  # the first kernel that takes it; an older one ignores it

    def default(self, kb: int, pmd_kb: int | None) -> str:
        """A size's value at boot when the kernel parameter is not given."""
        return self.pmd_default if kb == pmd_kb else "never"

    def from_cmdline(self, value: str, sizes: tuple[int, ...],
                     start: dict[int, str] | None = None) -> dict[int, str] | None:
        """Each size's value at boot from the parameter, "<size>[KMG][-<size>],...:<mode>;...":
        the sizes it names take their group's mode, a range every size between its ends, a
        later group overrides an earlier one; every size it does not name starts at never,
        the PMD size too (the parameter marks the sizes configured, so the kernel does not
        give the PMD size `inherit`), or keeps what an earlier instance of the parameter gave
        it (`start`). None where the kernel refuses the whole parameter
        (a size it does not offer, a range the wrong way round, an unknown mode: it logs
        "error parsing string, ignoring setting"). mm/huge_memory.c setup_thp_anon() and
        mm/shmem.c setup_thp_shmem()."""
        out = {kb: "never" for kb in sizes} | dict(start or {})

        def size(text: str) -> int | None:  # mm/huge_memory.c get_order_from_str()
            n = memparse(text)
            return n // 1024 if n and n & (n - 1) == 0 and n // 1024 in out else None
        for group in value.split(";"):
            names, sep, mode = group.partition(":")
            if not sep or mode not in self.words:
                return None
            for name in names.split(","):
                lo, dash, hi = name.partition("-")
                a, b = size(lo), size(hi if dash else lo)
                if a is None or b is None or a > b:
                    return None
                out.update({kb: mode for kb in sizes if a <= kb <= b})
        return out


# mm/huge_memory.c hugepage_init_sysfs() and mm/shmem.c shmem_init(): "Default to setting
# PMD-sized THP to inherit the global setting and disable all other sizes", unless the
# kernel parameter configured them. thp_anon= arrived in Linux 6.12 ("mm: override mTHP
# "enabled" defaults at kernel cmdline"); thp_shmem= in 6.13, with transparent_hugepage_shmem=
# ("mm: add more kernel parameters to control mTHP").
SIZES: dict[str, SizeFile] = {z.file: z for z in (
    SizeFile("enabled", ("always", "inherit", "madvise", "never"), "inherit",
             "mm/huge_memory.c", "thp_anon", (6, 12)),
    SizeFile("shmem_enabled", ("always", "inherit", "within_size", "advise", "never"),
             "inherit", "mm/shmem.c", "thp_shmem", (6, 13)),
)}
assert tuple(SIZES) == SIZE_FILES


class SizesAtBoot(NamedTuple):
    """What the per-size files start with at boot on this kernel: the sizes that have each
    file, the PMD size, and the kernel's version (an older kernel ignores a parameter)."""
    files: dict[str, tuple[int, ...]]
    pmd_kb: int | None
    kernel: tuple[int, int] | None

    def defaults(self) -> list[tuple[KnobId, str, str]]:
        """(knob, value, source) where no kernel parameter sets them."""
        return [(KnobId.thp(f, kb), SIZES[f].default(kb, self.pmd_kb),
                 SIZES[f].default_source) for f, sizes in self.files.items() for kb in sizes]

    def from_cmdline(self, params: list[tuple[str, str]]) -> list[tuple[KnobId, str]]:
        """The values the kernel parameters give (each SizeFile.cmdline, in their order)."""
        out: list[tuple[KnobId, str]] = []
        for f, sizes in self.files.items():
            z, got = SIZES[f], None
            for key, value in params:
                if key == z.cmdline and takes(self.kernel, z.since):
                    got = z.from_cmdline(value, sizes, got) or got
            out += [(KnobId.thp(f, kb), v) for kb, v in (got or {}).items()]
        return out

    @classmethod
    def of(cls, thp: THPFacts, release: str | None) -> SizesAtBoot:
        """From what check read of THP (thp_rules.read_thp) and the kernel's release."""
        files = {f: tuple(kb for kb, d in sorted(thp.mthp.items()) if d.get(f) is not None)
                 for f in SIZE_FILES}
        files = {f: v for f, v in files.items() if v}
        # without hpage_pmd_size: the largest anonymous size is the PMD size
        # (include/linux/huge_mm.h THP_ORDERS_ALL_ANON: every order from 2 up to PMD_ORDER)
        pmd = thp.pmd_size_kb or (max(files["enabled"]) if "enabled" in files else None)
        return cls(files, pmd, kernel_version(release))


def sizes_at_boot(sr: SysRoot) -> SizesAtBoot:
    return SizesAtBoot.of(read_thp(sr), sr.read("/proc/sys/kernel/osrelease",
                                                quiet_missing=True))
