"""Findings and their catalog: every finding code is declared once, with its severity, a
generic title and the source of the rule; the code that raises it adds the rationale and the
evidence of the case at hand.

The core's codes are declared here; each engine declares its own in its package and lists them
in `Engine.codes`. `engines.catalog()` gathers them all; docs/findings.md and the JSON schema's list
of codes are generated from it (scripts/gen_findings.py), and a test fails when they drift.
"""

from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("ok", "info", "warn", "crit")


@dataclass(frozen=True)
class Finding:
    severity: str  # one of SEVERITIES
    code: str  # stable identifier for pipelines, e.g. "pg.huge_pages.fallback"
    title: str
    rationale: str
    evidence: str = ""
    source: str = ""  # where the rule or threshold comes from
    instance: str | None = None

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")


@dataclass(frozen=True)
class Code:
    """One finding code as declared. `severity` is the usual one; `also` lists the others a
    case may take (a warning that is only informational where the risk is absent)."""
    code: str
    severity: str
    title: str
    source: str = ""
    also: tuple[str, ...] = ()

    def __post_init__(self):
        for s in (self.severity, *self.also):
            if s not in SEVERITIES:
                raise ValueError(f"{self.code}: unknown severity {s!r}")

    def __call__(self, rationale: str, evidence: str = "", instance: str | None = None, *,
                 title: str | None = None, severity: str | None = None,
                 source: str | None = None) -> Finding:
        """This code raised for one case: the title may name the case's figures, the source
        may add to the declared one."""
        sev = severity or self.severity
        if sev != self.severity and sev not in self.also:
            raise ValueError(f"{self.code} is not declared with severity {sev!r}")
        return Finding(sev, self.code, title or self.title, rationale, evidence,
                       source if source is not None else self.source, instance)


class Codes(dict):
    """An engine's (or the core's) codes by name, declared in one table."""

    def __init__(self, *codes: Code):
        super().__init__()
        for c in codes:
            if c.code in self:
                raise ValueError(f"finding code {c.code} declared twice")
            self[c.code] = c

    def __getattr__(self, name: str) -> Code:  # CODES.x is not a thing: index by the code
        raise AttributeError(name)


TRANSHUGE = "Documentation/admin-guide/mm/transhuge.rst"
HUGETLBPAGE = "Documentation/admin-guide/mm/hugetlbpage.rst"

# The core's codes: the host and the plan, whatever engines run.
KERNEL_PARAMS = "Documentation/admin-guide/kernel-parameters.txt"
CGROUP_DOCS = ("Documentation/admin-guide/cgroup-v2.rst (HugeTLB); "
               "Documentation/admin-guide/cgroup-v1/hugetlb.rst")
CORE = Codes(
    Code("pool.os_floor", "crit", "Plan would starve the OS of memory",
         "the profile's pool.os_floor / os_floor_pct"),
    Code("pool.per_node", "info", "Pool planned per NUMA node", HUGETLBPAGE),
    Code("pool.node_short", "crit", "A bound instance's NUMA node has too few free huge pages "
         "for its next start", "mm/hugetlb.c allowed_mems_nr(); " + HUGETLBPAGE),
    Code("pool.gigantic_runtime", "info", "More gigantic pages (1 GiB on x86-64) needed at "
         "runtime", HUGETLBPAGE),
    Code("pool.hvo", "info", "HugeTLB Vmemmap Optimization gives the pools' struct pages back "
         "to the OS", "Documentation/mm/vmemmap_dedup.rst; Documentation/admin-guide/sysctl/"
         "vm.rst (hugetlb_optimize_vmemmap)"),
    Code("pool.demote", "info", "Free gigantic pages can be split into the smaller size in "
         "place", "Documentation/admin-guide/mm/hugetlbpage.rst (demote, demote_size)"),
    Code("pool.fragmented", "warn", "Free memory holds too few contiguous blocks to grow the pool",
         HUGETLBPAGE),
    Code("pool.unused", "warn", "Reserved huge pages are used by nothing found", HUGETLBPAGE),
    Code("pool.kept", "info", "The pool keeps pages for a stopped instance's next start",
         HUGETLBPAGE),
    Code("commit.limit", "warn", "With the planned pools CommitLimit falls below what is "
         "committed", "mm/util.c vm_commit_limit(); Documentation/mm/overcommit-accounting.rst"),
    Code("cgroup.hugetlb.sigbus", "crit", "The instance will crash with SIGBUS: its cgroup's "
         "fault limit is below its huge pages", CGROUP_DOCS),
    Code("cgroup.hugetlb.reserve_short", "crit", "The instance cannot reserve its huge pages: "
         "its cgroup's reservation limit is below them", CGROUP_DOCS),
    Code("cgroup.memory.short", "warn", "Off huge pages, the instance's buffers exceed its "
         "cgroup's memory limit", "Documentation/admin-guide/cgroup-v2.rst (Memory: "
         "memory.max; HugeTLB pages are charged to the hugetlb controller only)"),
    Code("cgroup.hugetlb.unseen", "warn", "The huge page limits above the instance's cgroup "
         "are out of sight (a cgroup namespace)", CGROUP_DOCS),
    Code("cgroup.hugetlb.measured", "info", "The huge page limits above the instance's cgroup, "
         "out of sight, allow its need (measured by faulting free pages)", CGROUP_DOCS),
    Code("cgroup.memory.hugetlb_charged", "warn", "Huge pages are charged to the memory limit "
         "(memory_hugetlb_accounting) and it is below them", "Documentation/admin-guide/"
         "cgroup-v2.rst (mount options: memory_hugetlb_accounting)"),
    Code("cgroup.hugetlb.hit", "crit", "The instance's cgroup hit its huge page limit",
         CGROUP_DOCS),
    Code("host.container", "info", "hpadvise runs inside a container and sees part of the "
         "host", "pid_namespaces(7); Documentation/admin-guide/cgroup-v2.rst (HugeTLB)"),
    Code("boot.overridden", "crit", "The next boot would undo the plan", "sysctl.d(5), "
         "sysctl(8) (--system), tuned.conf(5), kernel-parameters.txt"),
    Code("boot.not_persisted", "warn", "A planned knob would not survive a reboot",
         KERNEL_PARAMS, also=("info",)),
    Code("boot.instance_breaks", "crit", "After a reboot the pool is too small for the "
         "instances on huge pages now", HUGETLBPAGE),
    Code("boot.differs", "warn", "A knob is not what the next boot sets", "sysctl.d(5)"),
    Code("thp.conflict", "warn", "Instances need different THP values", TRANSHUGE),
    Code("thp.resolved", "info", "THP value chosen so that every instance can live with it",
         TRANSHUGE),
    Code("thp.unavailable", "info", "THP knobs not readable", TRANSHUGE),
    Code("thp.per_process", "info", "A server gets a THP mode of its own (prctl at its "
         "restart) where the host-wide mode gives it more than it wants", "prctl(2) "
         "PR_SET_THP_DISABLE, PR_THP_DISABLE_EXCEPT_ADVISED (Linux 6.18); systemd.exec(5) "
         "MemoryTHP=", ("warn",)),
    Code("thp.taken", "info", "The plan lowers enabled below always while a server holds THP "
         "it did not madvise() for", TRANSHUGE),
    Code("thp.own_mode", "info", "A server runs in a THP mode of its own: the host-wide "
         "enabled does not reach its memory", "prctl(2) PR_SET_THP_DISABLE; "
         "Documentation/filesystems/proc.rst (THP_enabled, THPeligible)"),
    Code("thp.size_override", "warn", "A per-size THP knob overrides the top-level mode",
         TRANSHUGE, ("info",)),
    Code("cmdline.hugepages", "info", "Kernel command line reserves huge pages at boot",
         KERNEL_PARAMS),
    Code("cmdline.hugepagesz", "info", "Kernel command line names a huge page size",
         KERNEL_PARAMS + "; arch/*/mm/hugetlbpage.c arch_hugetlb_valid_size()", also=("warn",)),
    Code("cmdline.default_hugepagesz", "info", "Kernel command line sets the default huge page "
         "size", KERNEL_PARAMS),
    Code("cmdline.transparent_hugepage", "info", "Kernel command line sets the THP mode",
         KERNEL_PARAMS),
    Code("cmdline.transparent_hugepage_shmem", "info", "Kernel command line sets the shmem THP "
         "mode", KERNEL_PARAMS),
    Code("instances.none", "info", "No database instance found"),
    Code("instance.error", "crit", "An instance could not be read or sized", also=("warn",)),
    Code("engine.failed", "crit", "An engine could not finish discovering its instances"),
)


def markdown(catalog: dict[str, tuple[str, Code]]) -> str:
    """docs/findings.md, generated from the catalog (engines.catalog())."""
    lines = ["# Finding codes", "",
             "Every code `hpadvise check` can report, generated from the catalog by",
             "`scripts/gen_findings.py`: edit the declarations in the code, not this file. Codes",
             "are stable; pipelines may match on them (`check --json`). A severity such as",
             "`warn/info` means the first is usual and the others apply to milder cases.", "",
             "| code | severity | title | declared by | source |", "|---|---|---|---|---|"]
    for code, (owner, c) in catalog.items():
        sev = "/".join((c.severity, *c.also))
        lines.append(f"| `{code}` | {sev} | {c.title} | {owner} | {c.source} |")
    return "\n".join(lines) + "\n"

