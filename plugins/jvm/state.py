"""The JVM engine's state for one instance (Instance.state): what discovery read of a JVM,
which the sizing, the findings and the advice read in turn."""

from __future__ import annotations

from dataclasses import dataclass, field

from .flags import JvmFlags


@dataclass
class Jvm:
    pid: int
    owner: str | None
    flags: JvmFlags
    major: int | None
    app: str | None
    heap: int
    heap_source: str
    # What smaps shows (None when unreadable).
    hugetlb_kb: int | None = None
    held: dict[int, int] = field(default_factory=dict)  # hugetlb pages mapped, per size (kB)
    regions: list = field(default_factory=list)  # (what, bytes, page kB or None) as sized
    anon_huge_kb: int | None = None
    # THP in the mappings that hold the heap (thp.heap_on_thp), the knob governing them, how
    # it was read, and whether the process switched THP off for itself (prctl)
    heap_thp_kb: int | None = None
    heap_knob: str = "enabled"
    heap_evidence: str = ""
    prctl_off: bool = False
    observe_note: str | None = None
    # Thread stacks THP enabled=always would page in whole (JDK-8312182), as evidence; None
    # when they are safe (small stacks, or a JDK with THPStackMitigation) or unknown.
    stack_risk: str | None = None
    release: str | None = None  # its JDK's `release` file (JAVA_VERSION, OS_ARCH)
    # in a root of its own that does not show the kernel's THP settings: HotSpot reads its
    # THP mode there at start and, finding none, turns -XX:+UseTransparentHugePages off
    thp_hidden: str | None = None
