"""hugetlb cgroup limits of a process, and what they mean for an instance's huge pages.

A process's huge pages are charged to its hugetlb cgroup twice over: when a mapping reserves
them (mmap, shmget) against the reservation limit, and when a page is first touched against
the fault limit (Documentation/admin-guide/cgroup-v2.rst, "HugeTLB"; cgroup-v1/hugetlb.rst).
A reservation beyond its limit fails the mmap up front: a server falls back to normal pages or
refuses to start, cleanly. A fault beyond its limit, with reservations unlimited, kills the
process with SIGBUS at the first touch past the limit, long after a successful start: the
crash reported from Kubernetes and Docker again and again (PostgreSQL "terminated by signal 7:
Bus error", initdb dying in a container). The tightest limit of the process's cgroup and its
ancestors applies.

Files (per page size, named as the kernel names it, mm/hugetlb_cgroup.c: 2MB, 1GB):
  v2  hugetlb.<size>.max, .rsvd.max, .current, .rsvd.current, .events ("max N": times the
      fault limit was hit, this cgroup and below)
  v1  hugetlb.<size>.limit_in_bytes, .rsvd.limit_in_bytes, .usage_in_bytes,
      .rsvd.usage_in_bytes, .failcnt
Both can be mounted at once (hybrid hosts: v1 controllers under /sys/fs/cgroup and v2 at
/sys/fs/cgroup/unified); the mounts are read from /proc/self/mountinfo.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .sysroot import SysRoot

GIB_KB = 1048576


def size_name(page_kb: int) -> str:
    """The kernel's name for a page size in hugetlb cgroup files (mm/hugetlb_cgroup.c,
    mem_fmt(): 64KB, 2MB, 32MB, 1GB, 16GB)."""
    if page_kb >= GIB_KB:
        return f"{page_kb // GIB_KB}GB"
    return f"{page_kb // 1024}MB" if page_kb >= 1024 else f"{page_kb}KB"


@dataclass(frozen=True)
class HugetlbLimit:
    """The hugetlb limits that apply to one process for one page size."""
    version: int  # 1 or 2
    cgroup: str  # the process's own cgroup, relative to the hierarchy's root
    size: str  # "2MB", "1GB"
    limit_bytes: int | None  # fault limit; None = unlimited
    limit_cgroup: str | None  # the cgroup that sets it (the tightest on the way to the root)
    rsvd_limit_bytes: int | None  # reservation limit; None = unlimited (or not supported)
    rsvd_limit_cgroup: str | None
    usage_bytes: int | None  # faulted now, in the process's own cgroup
    rsvd_usage_bytes: int | None  # reserved now
    max_events: int  # times the fault limit was hit (v2 events "max", v1 failcnt)
    mount: str  # where the hierarchy is mounted, to name the files

    def file(self, what: str = "max") -> str:
        """The path of a limit file, e.g. file("max") or file("rsvd.max")."""
        v1 = {"max": "limit_in_bytes", "rsvd.max": "rsvd.limit_in_bytes"}
        name = what if self.version == 2 else v1.get(what, what)
        where = self.limit_cgroup if what == "max" else self.rsvd_limit_cgroup
        return f"{self.mount}{(where or self.cgroup).rstrip('/')}/hugetlb.{self.size}.{name}"


@dataclass(frozen=True)
class Verdict:
    """Whether an instance's cgroup can hold the huge pages it needs."""
    kind: str  # fits | reserve_short | sigbus
    need_bytes: int
    limit: HugetlbLimit


def mounts(sr: SysRoot) -> dict[str, str]:
    """{"v2": mount point, "hugetlb": v1 mount point, "memory": v1 mount point} of the
    hierarchies the limits live in (mountinfo field 5 is the mount point, the super options
    after " - " name the controllers)."""
    out: dict[str, str] = {}
    for line in (sr.read("/proc/self/mountinfo", quiet_missing=True) or "").splitlines():
        pre, _, post = line.partition(" - ")
        f, g = pre.split(), post.split()
        if len(f) < 5 or len(g) < 3:
            continue
        if g[0] == "cgroup2":
            out.setdefault("v2", f[4])
        elif g[0] == "cgroup":
            for ctl in ("hugetlb", "memory"):
                if ctl in g[2].split(","):
                    out.setdefault(ctl, f[4])
    return out


def hidden_ancestors(sr: SysRoot, hier: dict[str, str] | None = None) -> tuple[str, ...]:
    """The cgroup v2 mount points whose visible root is not the hierarchy's root: inside a
    cgroup namespace (a container's), or a subtree bind-mounted, the limits of the cgroups
    above are out of sight. The root cgroup has no cgroup.type file; every other cgroup has
    one (Documentation/admin-guide/cgroup-v2.rst, "Core Interface Files")."""
    hier = mounts(sr) if hier is None else hier
    v2 = hier.get("v2")
    return (v2,) if v2 and sr.exists(f"{v2.rstrip('/')}/cgroup.type") else ()


def hugetlb_accounting(sr: SysRoot) -> bool:
    """Whether the cgroup v2 hierarchy is mounted with memory_hugetlb_accounting (Linux 6.6+):
    then huge pages are charged to the memory controller too, memory.max included
    (Documentation/admin-guide/cgroup-v2.rst, mount options)."""
    for line in (sr.read("/proc/self/mountinfo", quiet_missing=True) or "").splitlines():
        _, _, post = line.partition(" - ")
        g = post.split()
        if len(g) >= 3 and g[0] == "cgroup2":
            return "memory_hugetlb_accounting" in g[2].split(",")
    return False


def _bytes(text: str | None) -> int | None:
    """A limit or usage: None for "max" and v1's "no limit" (the largest page-aligned long)."""
    if text is None:
        return None
    text = text.strip()
    if not text.isdigit():
        return None
    v = int(text)
    return None if v >= 2**63 - 2**21 else v


def _events(text: str | None) -> int:
    mt = re.search(r"^max (\d+)", text or "", re.M)
    return int(mt.group(1)) if mt else int(text.strip()) if (text or "").strip().isdigit() else 0


def _chains(sr: SysRoot, pid: int | str, controller: str, hier: dict[str, str] | None):
    """(version, mount, [own cgroup, parent, ..., "/"]) for each hierarchy of `pid` where
    `controller` may live: the unified one, and a v1 one that has it (/proc/PID/cgroup lines
    are "ID:controllers:path", the unified one "0::path"; cgroups(7))."""
    hier = mounts(sr) if hier is None else hier
    for line in (sr.read(f"/proc/{pid}/cgroup", quiet_missing=True) or "").splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "" and "v2" in hier:
            version, mount = 2, hier["v2"]
        elif controller in controllers.split(",") and controller in hier:
            version, mount = 1, hier[controller]
        else:
            continue
        parts = [p for p in path.split("/") if p]
        yield version, mount, ["/" + "/".join(parts[:d]) for d in range(len(parts), -1, -1)]


def limits(sr: SysRoot, pid: int | str, hier: dict[str, str] | None = None
           ) -> tuple[HugetlbLimit, ...]:
    """Every hugetlb limit that applies to `pid`, per hierarchy and page size; sizes with no
    limit anywhere on the way to the root are left out."""
    out: list[HugetlbLimit] = []
    for version, mount, chain in _chains(sr, pid, "hugetlb", hier):
        names = ("max", "rsvd.max", "current", "rsvd.current", "events") if version == 2 else \
            ("limit_in_bytes", "rsvd.limit_in_bytes", "usage_in_bytes", "rsvd.usage_in_bytes",
             "failcnt")
        own = f"{mount}{chain[0].rstrip('/')}"
        sizes = sorted({m.group(1) for n in sr.listdir(own)
                        if (m := re.fullmatch(r"hugetlb\.(\d+[KMG]B)\.\w+.*", n))})
        for size in sizes:
            lim = rlim = None
            lim_cg = rlim_cg = None
            events = 0
            for cg in chain:
                d = f"{mount}{cg.rstrip('/')}"
                v = _bytes(sr.read(f"{d}/hugetlb.{size}.{names[0]}", quiet_missing=True))
                if v is not None and (lim is None or v < lim):
                    lim, lim_cg = v, cg
                v = _bytes(sr.read(f"{d}/hugetlb.{size}.{names[1]}", quiet_missing=True))
                if v is not None and (rlim is None or v < rlim):
                    rlim, rlim_cg = v, cg
                events = max(events, _events(sr.read(f"{d}/hugetlb.{size}.{names[4]}",
                                                     quiet_missing=True)))
            if lim is None and rlim is None and not events:
                continue
            out.append(HugetlbLimit(
                version, chain[0], size, lim, lim_cg, rlim, rlim_cg,
                _bytes(sr.read(f"{own}/hugetlb.{size}.{names[2]}", quiet_missing=True)),
                _bytes(sr.read(f"{own}/hugetlb.{size}.{names[3]}", quiet_missing=True)),
                events, mount))
    return tuple(out)


@dataclass(frozen=True)
class MemoryLimit:
    """The tightest memory limit on a process (memory.max, v1 memory.limit_in_bytes). Huge
    pages are not charged to it; memory on normal pages, shared memory included, is."""
    limit_bytes: int
    file: str


def memory_limit(sr: SysRoot, pid: int | str, hier: dict[str, str] | None = None
                 ) -> MemoryLimit | None:
    """The tightest memory limit of `pid`'s cgroup and its ancestors; None when unlimited."""
    best: MemoryLimit | None = None
    for version, mount, chain in _chains(sr, pid, "memory", hier):
        name = "memory.max" if version == 2 else "memory.limit_in_bytes"
        for cg in chain:
            f = f"{mount}{cg.rstrip('/')}/{name}"
            v = _bytes(sr.read(f, quiet_missing=True))
            if v is not None and (best is None or v < best.limit_bytes):
                best = MemoryLimit(v, f)
    return best


def verdict(lims: tuple[HugetlbLimit, ...], page_kb: int, pages: int) -> Verdict | None:
    """The worst case among the limits for `pages` huge pages of `page_kb`: reservations
    capped below the need (mmap fails: a fallback or a refusal at start, cleanly), faults
    capped below it with reservations free (SIGBUS at the first touch past the cap), or it
    fits. None when no limit applies to that size. Whether a limit was hit already is the
    limit's max_events."""
    need = pages * page_kb * 1024
    worst = None
    # A reservation refused anywhere fails the mmap before any page is touched: that outcome
    # comes first, then the SIGBUS.
    rank = {"fits": 0, "sigbus": 1, "reserve_short": 2}
    for lim in lims:
        if lim.size != size_name(page_kb):
            continue
        if lim.rsvd_limit_bytes is not None and lim.rsvd_limit_bytes < need:
            kind = "reserve_short"
        elif lim.limit_bytes is not None and lim.limit_bytes < need:
            kind = "sigbus"
        else:
            kind = "fits"
        if worst is None or rank[kind] > rank[worst.kind] or (
                kind == worst.kind and lim.max_events > worst.limit.max_events):
            worst = Verdict(kind, need, lim)
    return worst


# What a cgroup path says of the workload in it: Kubernetes pods (the kubelet's cgroupfs and
# systemd drivers: kubepods/<qos>/pod<uid>/<container>, kubepods-<qos>-pod<uid>.slice/
# <runtime>-<container>.scope), containers of Docker, containerd, CRI-O and Podman, systemd
# services.
_POD = re.compile(r"(?:^|/)kubepods(?:\.slice)?/(?:(?:kubepods-)?(burstable|besteffort)"
                  r"(?:\.slice)?/)?(?:kubepods-(?:(?:burstable|besteffort)-)?)?pod([0-9a-f_-]+)"
                  r"(?:\.slice)?(?:/(.+))?$")
_SCOPE = re.compile(r"(docker|cri-containerd|crio|libpod)-([0-9a-f]{12,64})\.scope$")
_RUNTIME = {"docker": "Docker", "cri-containerd": "containerd", "crio": "CRI-O",
            "libpod": "Podman"}


def workload(path: str) -> str | None:
    """The workload a cgroup path names, for people: "Kubernetes pod <uid> (burstable),
    container <id> (containerd)", "Docker container <id>", "service postgresql.service"; None
    for a path that names none."""
    path = path.rstrip("/")
    mt = _POD.search(path)
    if mt:
        qos, uid, rest = mt.group(1) or "guaranteed", mt.group(2).replace("_", "-"), mt.group(3)
        out = f"Kubernetes pod {uid} ({qos})"
        if rest:
            leaf = rest.rsplit("/", 1)[-1]
            sc = _SCOPE.search(leaf)
            cid, rt = (sc.group(2), _RUNTIME[sc.group(1)]) if sc else (leaf, None)
            out += f", container {cid[:12]}" + (f" ({rt})" if rt else "")
        return out
    leaf = path.rsplit("/", 1)[-1]
    sc = _SCOPE.search(leaf)
    if sc:
        return f"{_RUNTIME[sc.group(1)]} container {sc.group(2)[:12]}"
    mt = re.search(r"(?:^|/)docker/([0-9a-f]{12,64})$", path)
    if mt:
        return f"Docker container {mt.group(1)[:12]}"
    if leaf.endswith(".service"):
        return f"service {leaf}"
    return None
