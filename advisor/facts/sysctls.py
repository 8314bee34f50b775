"""The kernel's settings under /proc/sys that hpadvise reads or plans, each declared once, as
data: its name, the kernel's default and where that default comes from, the profile's key and
the values it takes, its finding, and the rule that decides the value a plan wants.

Everything else is derived from a declaration: check reads every declared setting
(`HostFacts.sysctls`), the boot reader recognises it in sysctl files and `sysctl -w` lines, the
plan decides it (planning/sysctl_plan.py applies the rule: `Report.sysctls`, and a "sysctl"
Change where it differs now), apply sets, verifies and restores it (changes.actions.Sysctl)
and persists it in hpadvise's sysctl.d drop-in, rollback puts it back, the boot view shows it
now, at the next boot and planned where the plan manages it, the metrics export it
(a metric family of its own), and a profile sets it in its [sysctl] section.

Adding a setting: declare it in SYSCTLS (a rule if a plan may change it), give the shipped
profiles its value, and test it (docs/writing-an-engine.md, "Adding a kernel setting").
vm.nr_hugepages is not planned here: it is the default size's pool (kit/knob_id.py, pools).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from ..kit.findings import Code
from ..kit.knob_id import KnobId
from ..kit.paths import knob_path

# include/uapi/linux/capability.h: CAP_IPC_LOCK is capability bit 14
CAP_IPC_LOCK = 14


class ShmCred(NamedTuple):
    """What the kernel asks of a process that creates a SysV segment on huge pages
    (shmget SHM_HUGETLB; fs/hugetlbfs/inode.c can_do_hugetlb_shm: CAP_IPC_LOCK in the initial
    user namespace, or vm.hugetlb_shm_group among its groups, in_group_p: fsgid and
    supplementary groups). A memory-lock limit no longer admits it: the kernel only logs that
    it is obsolete and refuses (hugetlb_file_setup)."""
    gid: int  # its file-system gid
    groups: frozenset[int]  # fsgid and supplementary groups
    ipc_lock: bool  # CAP_IPC_LOCK in effect, in the host's user namespace


def shm_cred(status: dict[str, str], own_userns: bool) -> ShmCred | None:
    """From /proc/PID/status (proc(5): Gid real, effective, saved, fs; Groups; CapEff in hex).
    `own_userns`: the process is in a user namespace of its own, where its capabilities do
    not count in the host's (capable() asks the initial one)."""
    try:
        gid = int(status["Gid"].split()[3])
        groups = {int(g) for g in status.get("Groups", "").split()}
        cap = int(status.get("CapEff", "0"), 16)
    except (KeyError, IndexError, ValueError):
        return None
    ipc_lock = bool(cap >> CAP_IPC_LOCK & 1) and not own_userns
    return ShmCred(gid, frozenset(groups | {gid}), ipc_lock)


class ShmUser(NamedTuple):
    """An instance whose server creates its huge pages as SysV shared memory (its engine says
    so), with the credentials of its process."""
    instance: str
    cred: ShmCred


class Case(NamedTuple):
    """What a rule decides from: the setting now, the profile's value, the host's NUMA nodes,
    the SysV huge page users among the planned instances, and whether the value the next
    boot gives is hpadvise's own (an earlier apply's drop-in)."""
    now: int | None
    wanted: object  # the profile's value ("keep" leaves the setting alone)
    numa_nodes: tuple[int, ...]
    shm_users: tuple[ShmUser, ...]
    own: bool = False


class Want(NamedTuple):
    """A rule's decision: the value the plan wants (it persists it, and changes it where it
    differs now), or None where no value is right (the finding says what to do), with why."""
    value: int | None
    why: str
    evidence: str
    severity: str = "warn"
    title: str | None = None


class Sysctl(NamedTuple):
    name: str  # "vm.zone_reclaim_mode"
    # a plannable setting: the kernel's default and its source, the profile's values, the
    # finding, and the rule; a setting only read (for other findings) has none of these
    default: int | None = None
    default_source: str = ""
    profile: tuple = ()  # the values a profile may give besides "keep"
    profile_default: object = "keep"
    code: Code | None = None
    rule: Callable[[Case], Want | None] | None = None
    meaning: str = ""  # what its value is, for its metric's help (vm.rst)

    @property
    def metric(self) -> str:
        """Its metric family (hpadvise_sysctl_vm_zone_reclaim_mode): one per setting, since
        the values of two settings are not the same kind of number (a mode, a group id)."""
        return "hpadvise_sysctl_" + self.name.replace(".", "_")

    @property
    def path(self) -> str:
        return knob_path(KnobId.sysctl(self.name))

    @property
    def key(self) -> str:
        """Its key in a profile's [sysctl] section: the name without "vm." or "kernel."."""
        return self.name.split(".", 1)[1]


def _zone_reclaim(c: Case) -> Want | None:
    # Documentation/admin-guide/sysctl/vm.rst, zone_reclaim_mode: with it on, an allocation
    # reclaims (drops page cache, writes, swaps) on its own node before it takes another
    # node's memory; "for file servers or workloads that benefit from having their data
    # cached, zone_reclaim_mode should be left disabled". A database's buffers and the page
    # cache it reads through are such data. One node: there is no other node to spare.
    if c.wanted == "keep" or c.now is None or len(c.numa_nodes) < 2:
        return None
    return Want(int(c.wanted), "With zone_reclaim_mode on, an allocation on a full node "
                "reclaims that node's page cache (and with bits 2 and 4 writes dirty pages out "
                "and swaps) before it uses free memory on another node: a database's cached "
                "data is dropped while other nodes have memory to spare.",
                f"vm.zone_reclaim_mode = {c.now}; {len(c.numa_nodes)} NUMA nodes")


def _shm_group(c: Case) -> Want | None:
    """The group every SysV huge page user without CAP_IPC_LOCK is in: kept where it admits
    them all, set where it is root's (0, nobody's choice) or an earlier apply's and they share
    one, never moved from a group someone chose (it may admit others hpadvise does not know
    of)."""
    users = [u for u in c.shm_users if not u.cred.ipc_lock]
    if c.wanted == "keep" or c.now is None or not users:
        return None
    names = ", ".join(u.instance for u in users)
    groups = "; ".join(f"{u.instance}: " + " ".join(map(str, sorted(u.cred.groups)))
                       for u in users)
    if all(c.now in u.cred.groups for u in users):
        return Want(c.now, "It admits every server that creates its huge pages as SysV "
                    "shared memory.", f"vm.hugetlb_shm_group = {c.now}; {groups}")
    if c.now != 0 and not c.own:
        names = ", ".join(u.instance for u in users if c.now not in u.cred.groups)
        return Want(None, f"vm.hugetlb_shm_group is {c.now}, a group someone chose (it may "
                    f"admit others), and the kernel refuses SysV huge pages to servers outside it "
                    f"without CAP_IPC_LOCK: {names}. Add them to that group, or give "
                    "them CAP_IPC_LOCK; hpadvise does not move it.",
                    f"vm.hugetlb_shm_group = {c.now}; {groups}",
                    title=f"vm.hugetlb_shm_group {c.now} does not admit {names}")
    common = frozenset.intersection(*(u.cred.groups for u in users))
    if not common:
        return Want(None, "The servers that create their huge pages as SysV shared memory "
                    "share no group, and vm.hugetlb_shm_group names one: give them a common "
                    "group (or CAP_IPC_LOCK) first.", groups,
                    title="No one group admits every SysV huge page user")
    own = {u.cred.gid for u in users}
    gid = next(iter(own)) if len(own) == 1 and own <= common else min(common)
    return Want(gid, "The kernel refuses a SysV shared memory segment on huge pages (shmget "
                "SHM_HUGETLB) to a process without CAP_IPC_LOCK whose groups do not include "
                "vm.hugetlb_shm_group; the server then runs on normal pages. Restart it after "
                "apply: a server asks for its segment when it starts.",
                f"vm.hugetlb_shm_group = {c.now}; {names} run as group {gid}, without "
                "CAP_IPC_LOCK")


CODES = {c.code: c for c in (
    Code("kernel.zone_reclaim_mode", "warn", "zone_reclaim_mode reclaims cached data on a "
         "NUMA host", "Documentation/admin-guide/sysctl/vm.rst (zone_reclaim_mode)"),
    Code("kernel.hugetlb_shm_group", "warn", "SysV huge pages are refused to the server's group",
         "fs/hugetlbfs/inode.c can_do_hugetlb_shm(); Documentation/admin-guide/sysctl/vm.rst "
         "(hugetlb_shm_group)"),
)}

SYSCTLS: tuple[Sysctl, ...] = (
    # the kernel's default: node_reclaim_mode is zero-initialised; since Linux 3.16 ("mm:
    # disable zone_reclaim_mode by default") nothing turns it on where nodes are far apart
    Sysctl("vm.zone_reclaim_mode", 0, "mm/vmscan.c node_reclaim_mode", (0,), 0,
           CODES["kernel.zone_reclaim_mode"], _zone_reclaim,
           "bits: 1 reclaim on the node first, 2 write dirty pages out, 4 swap; 0 off"),
    # zero-initialised: root's group
    Sysctl("vm.hugetlb_shm_group", 0, "fs/hugetlbfs/inode.c sysctl_hugetlb_shm_group",
           ("auto",), "auto", CODES["kernel.hugetlb_shm_group"], _shm_group,
           "the group id whose members may create SysV shared memory on huge pages"),
    # read for other findings, never planned here
    Sysctl("vm.overcommit_memory"), Sysctl("vm.overcommit_ratio"),
    Sysctl("vm.overcommit_kbytes"), Sysctl("vm.min_free_kbytes"), Sysctl("vm.nr_hugepages"),
    Sysctl("vm.nr_overcommit_hugepages"), Sysctl("vm.swappiness"),
    Sysctl("vm.hugetlb_optimize_vmemmap"), Sysctl("kernel.shmmax"), Sysctl("kernel.shmall"),
)
BY_NAME = {s.name: s for s in SYSCTLS}
PLANNED = tuple(s for s in SYSCTLS if s.rule is not None)


def declared(name: str) -> Sysctl | None:
    """The declaration of a setting a plan may change, by its name as sysctl files write it
    (vm.zone_reclaim_mode or vm/zone_reclaim_mode)."""
    s = BY_NAME.get(name.strip().lstrip("-").replace("/", "."))
    return s if s is not None and s.rule is not None else None
