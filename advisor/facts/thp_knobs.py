"""The three top-level THP files under /sys/kernel/mm/transparent_hugepage, each declared once,
as data: the words the kernel takes (a profile's `[thp]` values besides "keep"), the plan's
order of preference among them, why the plan sets it, the kernel's default and its source,
the kernel parameter and TuneD option that set it at boot, and its finding.

Their identity is kit/knob_id.py's (`KnobId.thp(file)`); their values are read with its one
parser of the choice format. The profile schema, the plan's THP resolution
(planning/host_findings.py), the boot reader, persistence (the kernel command line, TuneD's
child profile), the metrics and the host table read these declarations; none spells a file's
words or defaults again. The per-size files (hugepages-<kB>kB/enabled) are thp_rules.py's.
"""

from __future__ import annotations


from typing import NamedTuple

from ..kit.findings import Code, Codes
from ..kit.knob_id import THP_FILES

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

    @property
    def profile_values(self) -> tuple[str, ...]:
        return (*self.words, "keep")


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
            CODES["thp.enabled"]),
    ThpFile("defrag", ("always", "defer", "defer+madvise", "madvise", "never"),
            ("madvise", "defer+madvise", "defer", "never", "always"),
            "with madvise only processes that asked for THP stall in direct compaction",
            "madvise", "mm/huge_memory.c", None, None, ("transparent_hugepage.defrag",),
            CODES["thp.defrag"]),
    ThpFile("shmem_enabled", ("always", "within_size", "advise", "never", "deny", "force"),
            ("never", "advise", "within_size", "always", "deny", "force"),
            "governs shared anonymous memory, i.e. PostgreSQL's shared buffers when they are "
            "not on static huge pages", "never", "mm/shmem.c",
            "CONFIG_TRANSPARENT_HUGEPAGE_SHMEM_HUGE_", "transparent_hugepage_shmem", (),
            CODES["thp.shmem_enabled"]),
)}
assert tuple(THP) == THP_FILES  # the identities knob_id.py gives them, in the same order
