"""Where a process may take its huge pages from on a NUMA host, and how a restart keeps it there.

A task's hugetlb reservation counts the free pages of the nodes its cpuset allows
(cpuset_current_mems_allowed: "Mems_allowed_list" in /proc/PID/status), narrowed to the nodes of
an MPOL_BIND memory policy (mm/hugetlb.c, allowed_mems_nr() with policy_mbind_nodemask(); the
pages themselves come from those nodes only, dequeue_hugetlb_folio_vma()). A preferred or
interleaved policy narrows nothing: the pages may come from any allowed node. The policy is
not in status: /proc/PID/numa_maps shows it for every mapping, the task's own where the mapping
has none (Documentation/filesystems/proc.rst, "numa_maps"; the text is mm/mempolicy.c,
mpol_to_str(): MODE[=static|=relative][:NODELIST]).

Both are inherited through fork and exec (set_mempolicy(2); cgroups(7)), and are lost when the
server is started again by a process outside them (a restart through pg_ctl run by hpadvise).
`keeper()` makes the process that starts it again take the same cgroup and policy first.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from .sysroot import SysRoot, nodelist

# mpol_to_str()'s policy_modes[] names, longest first for the pattern
_MODES = ("weighted interleave", "prefer (many)", "interleave", "default", "prefer", "bind",
          "local")
_POLICY = re.compile(r"^[0-9a-f]+ (" + "|".join(re.escape(m) for m in _MODES)
                     + r")(?:=(static|relative))?(?::([0-9,-]+))?(?:\s|$)")

# include/uapi/linux/mempolicy.h
MPOL = {"default": 0, "prefer": 1, "bind": 2, "interleave": 3, "local": 4, "prefer (many)": 5,
        "weighted interleave": 6}
MPOL_FLAGS = {"static": 1 << 15, "relative": 1 << 14}
# numactl's spelling of each mode (numactl(8))
_NUMACTL = {"bind": "--membind", "prefer": "--preferred", "interleave": "--interleave",
            "prefer (many)": "--preferred-many", "weighted interleave": "--weighted-interleave",
            "local": "--localalloc"}
# set_mempolicy's number per architecture: arch/x86/entry/syscalls/syscall_64.tbl (238),
# include/uapi/asm-generic/unistd.h (237: arm64, riscv64, loongarch64),
# arch/powerpc/kernel/syscalls/syscall.tbl (261), arch/s390/kernel/syscalls/syscall.tbl (270)
_NR_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "riscv64": 237, "loongarch64": 237,
                     "ppc64le": 261, "ppc64": 261, "s390x": 270}


def listed(nodes: tuple[int, ...]) -> str:
    return ",".join(str(n) for n in nodes)


@dataclass(frozen=True)
class Policy:
    """A memory policy as numa_maps shows it."""
    mode: str
    nodes: tuple[int, ...] = ()
    flag: str = ""  # "static" or "relative" (MPOL_F_STATIC_NODES / MPOL_F_RELATIVE_NODES)

    def __str__(self) -> str:
        return self.mode + (f"={self.flag}" if self.flag else "") + (
            f":{listed(self.nodes)}" if self.nodes else "")

    @property
    def default(self) -> bool:
        return self.mode == "default"

    def numactl(self) -> list[str]:
        """The numactl(8) options that start a process with this policy."""
        opt = _NUMACTL.get(self.mode)
        if opt is None:
            return []
        return [opt] if self.mode == "local" else [f"{opt}={listed(self.nodes)}"]


def parse_policy(line: str) -> Policy | None:
    mt = _POLICY.match(line)
    if not mt:
        return None
    return Policy(mt.group(1), nodelist(mt.group(3) or ""), mt.group(2) or "")


def task_policy(sr: SysRoot, pid: int) -> Policy | None:
    """The policy most of the process's mappings show: its own task policy (a mapping with a
    policy of its own, from mbind(2), is the exception). None when numa_maps cannot be read
    (a kernel without NUMA, another user's process)."""
    text = sr.read(f"/proc/{pid}/numa_maps", quiet_missing=True)
    if not text:
        return None
    seen = Counter(p for p in map(parse_policy, text.splitlines()) if p is not None)
    return seen.most_common(1)[0][0] if seen else None


@dataclass(frozen=True)
class Binding:
    """The nodes a process's huge pages can come from, and what holds it there."""
    nodes: tuple[int, ...]
    by: tuple[str, ...]  # e.g. ("memory policy bind:1",), ("cpuset.mems 1",)

    def __str__(self) -> str:
        return " and ".join(self.by)


def binding(sr: SysRoot, pid: int, host_nodes: tuple[int, ...]) -> Binding | None:
    """What narrows `pid`'s huge pages to fewer nodes than the host has, or None."""
    from .procs import Proc
    nodes = set(host_nodes)
    by: list[str] = []
    mems = Proc(sr, pid).mems_allowed
    if mems and set(mems) != nodes:
        nodes &= set(mems)
        by.append(f"cpuset.mems {listed(tuple(mems))}")
    pol = task_policy(sr, pid)
    if pol is not None and pol.mode == "bind" and set(pol.nodes) != set(host_nodes):
        nodes &= set(pol.nodes)
        by.append(f"memory policy {pol}")
    return Binding(tuple(sorted(nodes)), tuple(by)) if by else None


def cgroup_dir(pid: int, sr: SysRoot | None = None) -> str | None:
    """The cgroup v2 directory of live `pid` ("0::PATH" in /proc/PID/cgroup, cgroups(7)), or
    None where there is no unified hierarchy."""
    from .cgroups import mounts
    sr = sr or SysRoot("/")
    v2 = mounts(sr).get("v2")
    text = sr.read(f"/proc/{pid}/cgroup", quiet_missing=True) or ""
    mt = re.search(r"^0::(/.*)$", text, re.M)
    if not v2 or not mt:
        return None
    return os.path.join(v2, mt.group(1).lstrip("/")).rstrip("/")


def _set_mempolicy(pol: Policy) -> None:
    nr = _NR_SET_MEMPOLICY.get(platform.machine())
    if nr is None:
        raise OSError(f"set_mempolicy: no system call number known for {platform.machine()}")
    words = max(pol.nodes, default=0) // 64 + 1
    mask = (ctypes.c_ulong * words)()
    for n in pol.nodes:
        mask[n // 64] |= 1 << (n % 64)
    libc = ctypes.CDLL(None, use_errno=True)
    mode = MPOL[pol.mode] | MPOL_FLAGS.get(pol.flag, 0)
    # maxnode counts one more bit than the mask holds (numactl passes the same)
    if libc.syscall(nr, mode, mask if pol.nodes else None, words * 64 + 1) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"set_mempolicy({pol}): {os.strerror(e)}")


@dataclass(frozen=True)
class Keep:
    """What a server runs under now, for the process that starts it again."""
    cgroup: str | None  # its cgroup v2 directory, where it differs from hpadvise's own
    policy: Policy | None  # its memory policy, where not the default
    # its THP mode (thp_exec.py), where it differs from hpadvise's own: the server started
    # again keeps it, or gets the one a plan gives it
    thp: str | None = None

    def __bool__(self) -> bool:
        return bool(self.cgroup or self.policy or self.thp)

    def describe(self) -> str:
        parts = ([f"cgroup {self.cgroup}"] if self.cgroup else []) + (
            [f"memory policy {self.policy}"] if self.policy else []) + (
            [f"THP mode {self.thp}"] if self.thp else [])
        return " and ".join(parts)

    def shell(self, cmd: str) -> str:
        """The same start in a shell script: the THP mode through `hpadvise thp-exec`, the
        policy through numactl, the cgroup by moving the starting shell into it (`echo $$ >
        cgroup.procs`)."""
        if self.thp is not None:  # this very hpadvise: a root shell's PATH may not have it
            import shlex
            import sys
            cmd = (f"{shlex.quote(sys.executable)} -m hpadvise.cli thp-exec --mode {self.thp} "
                   f"-- {cmd}")
        if self.policy is not None:
            cmd = "numactl " + " ".join(self.policy.numactl()) + " " + cmd
        if self.cgroup:
            cmd = f"sh -c 'echo $$ > {self.cgroup}/cgroup.procs && exec \"$@\"' sh {cmd}"
        return cmd


def keep_of(pid: int | None, thp: str | None = None) -> Keep:
    """The cgroup, memory policy and THP mode of live `pid` that a process started by
    hpadvise would not have: what a restart must give the server back. `thp`: the THP mode
    the server is to get instead of its own (a per-service plan, or its rollback)."""
    from .thp_exec import mode_now
    own_mode = mode_now()
    if thp is None and pid:
        thp = mode_of(pid)  # None: cannot be told now, and makes no difference now
    thp = thp if thp is not None and thp != own_mode else None
    if not pid:
        return Keep(None, None, thp)
    from .host import read_numa_nodes
    sr = SysRoot("/")
    cg, own = cgroup_dir(pid, sr), cgroup_dir(os.getpid(), sr)
    # numa_maps walks the process's page tables: read only where a policy can matter
    pol = task_policy(sr, pid) if len(read_numa_nodes(sr)) > 1 else None
    return Keep(cg if cg and cg != own else None,
                pol if pol is not None and not pol.default else None, thp)


def keeper(keep: Keep | None, uid: int | None = None, gid: int | None = None
           ) -> Callable[[], None] | None:
    """A preexec_fn that puts the starting process into `keep`'s cgroup and policy, then drops
    to uid/gid (after the move: cgroup.procs is root's to write). None when there is nothing to
    do but drop privileges, which subprocess's user/group arguments do."""
    if not keep:
        return None

    def run() -> None:
        if keep.thp is not None:
            from .thp_exec import set_mode
            set_mode(keep.thp)  # kept by what it execs: pg_ctl, the server and its children
        if keep.cgroup:
            with open(os.path.join(keep.cgroup, "cgroup.procs"), "w") as f:
                f.write("0")  # 0: the writing process (kernel/cgroup/cgroup.c, cgroup_procs_write_start)
        if keep.policy is not None:
            _set_mempolicy(keep.policy)
        if gid is not None:
            os.setgroups([])
            os.setgid(gid)
        if uid is not None:
            os.setuid(uid)
    return run


def mode_of(pid: int) -> str | None:
    """A live process's own THP mode (thp_exec.process_mode), read where this host's THP
    knobs let the modes be told apart."""
    from .thp_rules import read_thp
    from .thp_exec import process_mode
    from .thp_rules import thp_sizes
    sr = SysRoot("/")
    thp = read_thp(sr)
    gives = bool(thp_sizes(thp, "enabled", advised=False))
    return process_mode(sr.read(f"/proc/{pid}/status", quiet_missing=True),
                        sr.read(f"/proc/{pid}/smaps", quiet_missing=True) if gives else None,
                        gives, thp.pmd_size_kb)
