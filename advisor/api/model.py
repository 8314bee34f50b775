"""What the core and the engines hand each other: an instance, its demand, the plan's changes
and placements. Plain data with no behaviour, so every module can import it without pulling in
the registry, the actions or the findings.

Each decision of the plan is made once (plan.build) and carried here as a typed field:
`Placement` says where an instance's memory goes and why, `Change` says which knob changes,
of what kind, for which page size or instance, and what the next boot would set. Views read
these fields; none recomputes a decision or parses one back out of a title or a path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..kit.findings import SEVERITIES
from ..kit.knob_id import KnobId
from ..kit.unknown import Unknown

if TYPE_CHECKING:
    from ..facts.cgroups import HugetlbLimit, MemoryLimit
    from ..kit.findings import Finding
    from ..facts.host import HostFacts
    from .profiles import Profile
    from ..kit.sizing import PoolPlan

# The JSON report's version (docs/json-schema.md): it changes when a field is removed or
# changes meaning.
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Demand:
    """Memory an instance wants on huge pages, as a page count per candidate page size.

    `pages` maps page size (kB) -> pages needed at that size. `page_kb` is the size the
    instance is configured for now; `selectable` says whether the engine can be told to use
    another size (PostgreSQL's huge_page_size, PG >= 14)."""
    instance: str
    bytes: int | None
    page_kb: int
    pages: dict[int, int]
    exact: bool
    source: str
    selectable: bool = False
    node: int | None = None
    held_pages: int = 0  # pages of page_kb the running instance holds now (0 if not on hugetlb)
    # Pages of each size it takes at once as configured, where that is more than one size (a
    # JVM puts each region on its own page size); None: all of it on page_kb.
    split: dict[int, int] | None = None
    held_split: dict[int, int] | None = None  # likewise, what it holds now per size
    # on huge pages in part only: some of its buffers fell back to normal pages (a MySQL
    # buffer pool chunk each), so a restart on a pool of its size puts the rest there
    short: bool = False


@dataclass(frozen=True)
class Change:
    """One knob the plan wants changed: what it is now and what it should be.

    kind "pool": `size_kb` names the pool; "thp": `knob` names the THP file (enabled, defrag,
    shmem_enabled); "sysctl": `knob` names a setting facts/sysctls.py declares; "setting":
    `target` is the engine's setting and `instance` its instance. `target` is for people
    only: code reads the typed fields. `at_boot` is what the next boot would set (pools, THP
    and sysctls), filled in by the plan from the boot sources."""
    kind: str  # "pool" | "thp" | "sysctl" | "setting" | "process_thp" (a server's own THP mode)
    target: str  # the knob as people know it, e.g. "hugepages-2048kB/nr_hugepages"
    current: Any
    recommended: Any
    reason: str
    instance: str | None = None
    restart: bool = False  # takes effect only after the instance restarts
    size_kb: int | None = None  # kind "pool": the page size of the pool
    knob: str | None = None  # kind "thp": the file under transparent_hugepage/; "sysctl": its name
    at_boot: Any = None  # pools, THP, sysctls: the value the next boot sets, as things stand
    # kind "setting": where the value that wins comes from, when that is not hpadvise's to
    # change (a command line, a cluster member's own file): what to change where instead.
    # apply makes no blocked change, and says this.
    blocked: str | None = None
    # pools, THP and sysctls: the boot-time knob it changes (kit/knob_id.py), the identity
    # code reads; `size_kb` and `knob` say it in the JSON
    id: KnobId | None = None


# A file validate leaves in the data directory of every server it makes for itself: check
# and every other command leave such servers out (they are not the host's instances).
SCRATCH_MARK = "hpadvise-validate-scratch"


# Placement.status: where the plan puts an instance's huge page demand.
PLACEMENTS = ("pool", "thp", "held_back", "unsized", "kept", "stopped")


@dataclass(frozen=True)
class Placement:
    """Where one instance's memory goes, decided once by the plan.

    status "pool": `pages` pages of `page_kb` are in that size's static pool for it; "thp":
    its engine serves it from THP, not a pool; "held_back": its cgroup cannot hold the pages
    of `page_kb`, so the plan keeps it off huge pages; "unsized": its demand is unknown (its
    configuration could not be read); "kept": a stopped instance nobody named, which takes
    `pages` of `page_kb` when it starts (the pool keeps them; nothing of it is changed);
    "stopped": one that takes none at its start (nothing kept, nothing changed)."""
    instance: str
    status: str  # one of PLACEMENTS
    page_kb: int | None
    pages: int
    reason: str
    # Pages per size when it takes more than one size at once (Demand.split); else None.
    by_size: dict[int, int] | None = None
    # A stopped instance whose configuration gives fewer pages than the active apply that
    # planned it recorded (Recorded): that apply's ID, and the configuration's count; the
    # pages are the recorded ones. None: its own demand.
    recorded_by: str | None = None
    configured_pages: int | None = None

    @property
    def pooled(self) -> bool:
        return self.status == "pool"

    def sizes(self) -> dict[int, int]:
        """Pages per size it takes from the pools."""
        if self.status not in ("pool", "kept"):
            return {}
        return dict(self.by_size) if self.by_size else {self.page_kb: self.pages}


@dataclass(frozen=True)
class Recorded:
    """What an apply not rolled back recorded in its journal for an instance it planned: the
    pages it put in the pools for it, per size (recorded.py). The plan keeps at least these
    for it while it is stopped."""
    apply: str  # the apply's ID
    instance: str  # the instance's ID when that apply ran
    pages: dict[int, int]


@dataclass
class Instance:
    engine: str
    id: str  # stable, usable with --instance: "postgres:5432" or "postgres:/data/dir"
    label: str
    running: bool
    pid: int | None = None
    owner: str | None = None
    # Its release as the server or its files say it; an Unknown (with why and what supplies it)
    # where the engine looked and could not tell; None where the engine does not read releases.
    version: str | Unknown | None = None
    # What shared memory actually sits on now: "hugetlb", "thp", "4k", or None if unknown.
    backing: str | None = None
    backing_page_kb: int | None = None
    page_tables_kb: int | None = None  # VmPTE summed over the instance's processes
    page_tables_huge_kb: int | None = None  # estimate with the shared memory on huge pages
    settings: dict[str, Any] = field(default_factory=dict)
    demand: Demand | None = None
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # input errors: they make the exit code 2
    # hugetlb cgroup limits on its process (filled in by the core from /proc/PID/cgroup).
    cgroup: tuple[HugetlbLimit, ...] = ()
    memory_limit: MemoryLimit | None = None  # the tightest memory limit on it, if any
    # On a NUMA host: what holds its huge pages to demand.node ("memory policy bind:1",
    # "cpuset.mems 1"), or why they are held to several nodes.
    numa_binding: str | None = None
    # Whose cgroup those limits are: None, its own process's; "hpadvise", hpadvise's own (a
    # server not started yet starts where hpadvise runs: an init container, the container)
    cgroup_from: str | None = None
    # A stopped instance nobody named, and where it was found (a packaging layout, the
    # journal of an earlier apply): the plan keeps its pages if it takes them when it starts,
    # and changes nothing of it. None: running, or named by the user.
    found: str | None = None
    # Its process's own THP mode (thp_exec.py): "never" (prctl, THP_enabled: 0), "advised"
    # (prctl except-advised), "inherit"; None where it cannot be told (filled in by the core)
    thp_mode: str | None = None
    # THP (kB) its main process holds in memory it did not madvise(), read where the host gives
    # such memory THP (filled in by the core)
    thp_unadvised_kb: int | None = None
    # Its main process's memory by what decides its THP, with the sizes each part can get now
    # and under the plan (thp_regions.Region; filled in by the core)
    thp_regions: tuple = ()
    # Starts of the names of shared mappings its engine knows the server madvise()s where it
    # allocates their pages, through a mapping smaps no longer shows (set by the engine)
    thp_advised: tuple[str, ...] = ()
    # Its server creates its huge pages as SysV shared memory (shmget SHM_HUGETLB), which the
    # kernel allows only with CAP_IPC_LOCK or vm.hugetlb_shm_group (set by the engine); and
    # its process's credentials for that (facts/sysctls.ShmCred, filled in by the core)
    shm_sysv: bool = False
    shm_cred: Any = None
    # The engine's own typed state for this instance (a dataclass of its package). The core
    # never reads it; only the engine that made the instance does.
    state: Any = field(default=None, repr=False)


@dataclass(frozen=True)
class EngineOption:
    """A command-line option an engine adds to the core's commands (as sos plugins declare
    their PluginOpts): `hpadvise check --pgdata DIR` is PostgreSQL's, not the core's. Every
    such option is repeatable; its values reach the engine as `Targets.get(key)`."""
    flag: str  # e.g. "--pgdata"
    help: str
    metavar: str = "VALUE"
    commands: tuple[str, ...] = ("check", "snapshot", "k8s")
    # its values name instances (a data directory), as --instance does: a command about the
    # instances the user names (k8s) narrows to them when no --instance is given
    names_instances: bool = False

    @property
    def key(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Targets:
    """What the user pointed hpadvise at, beyond what it discovers by itself: DSNs (any
    engine's), and the values of the engines' own options (EngineOption.key -> values)."""
    dsns: tuple[str, ...] = ()
    options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # (engine, reference) of every instance an apply not rolled back changed (the journal):
    # stopped ones among them are found again (Engine.reference_of gives the reference)
    remembered: tuple[tuple[str, str], ...] = ()

    def get(self, key: str) -> tuple[str, ...]:
        return dict(self.options).get(key, ())

    def remembered_by(self, engine: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r for e, r in self.remembered if e == engine))

    @classmethod
    def of(cls, dsns=(), **options) -> "Targets":
        return cls(tuple(dsns or ()), tuple(sorted((k, tuple(v)) for k, v in options.items()
                                                   if v)))


@dataclass
class Report:
    """The plan: what `check` shows and every other command reads, each decision a field
    (plan.build makes it)."""
    host: HostFacts
    profile: Profile
    instances: list[Instance]
    findings: list[Finding] = field(default_factory=list)
    pools: list[PoolPlan] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    placements: dict[str, Placement] = field(default_factory=dict)  # by instance ID
    unused_pages: dict[int, int] = field(default_factory=dict)  # pool pages nothing uses
    blocked: list[str] = field(default_factory=list)  # reasons apply must refuse the plan
    # what the active applies recorded for the stopped instances, by instance ID
    recorded: dict[str, Recorded] = field(default_factory=dict)
    # the value the plan wants for each declared kernel setting it manages (sysctl_plan.py)
    sysctls: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    engines: dict = field(default_factory=dict, repr=False)  # name -> engines.Engine

    def worst(self) -> str:
        return max((f.severity for f in self.findings), key=SEVERITIES.index, default="ok")

    def pool_change(self, size_kb: int) -> Change | None:
        return next((c for c in self.changes if c.kind == "pool" and c.size_kb == size_kb),
                    None)
