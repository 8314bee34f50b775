"""The process table, read from /proc through a SysRoot.

Engines look processes up by name, then ask for the few files they need; nothing is read for
processes nobody asked about. Field meanings: Documentation/filesystems/proc.rst
("/proc/PID/status", "/proc/PID/smaps").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property

from ..kit.secrets import redact_args, redact_environ
from .sysroot import SysRoot, kb, nodelist


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    path: str
    size_kb: int
    kernel_page_kb: int
    rss_kb: int
    anon_huge_kb: int
    shmem_pmd_kb: int
    shared_hugetlb_kb: int
    private_hugetlb_kb: int
    offset: int = 0  # into the file it maps (bytes)
    inode: int = 0  # of the file it maps; 0 for anonymous memory
    flags: frozenset[str] = frozenset()  # VmFlags: "hg" MADV_HUGEPAGE, "nh" MADV_NOHUGEPAGE
    file_pmd_kb: int = 0  # FilePmdMapped

    @property
    def shared(self) -> bool:
        return self.perms[3:4] == "s"

    @property
    def hugetlb(self) -> bool:
        return self.kernel_page_kb > 4 or self.path.startswith("/anon_hugepage")


# start-end perms offset dev inode path (Documentation/filesystems/proc.rst, /proc/PID/maps)
_MAP_HEAD = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) ([0-9a-f]+) \S+ (\d+)[ \t]*(.*)$", re.M)
_FIELD = re.compile(r"^(\w+):\s+(\d+) kB$", re.M)
_VMFLAGS = re.compile(r"^VmFlags:(.*)$", re.M)


def parse_smaps(text: str, shared_only: bool = False) -> list[Mapping]:
    """Mappings of /proc/PID/smaps. `shared_only` skips private mappings without parsing
    their fields (a postmaster has hundreds; only the shared ones matter for its segment)."""
    heads = list(_MAP_HEAD.finditer(text))
    out: list[Mapping] = []
    for n, head in enumerate(heads):
        perms = head.group(3)
        if shared_only and perms[3] != "s":
            continue
        end = heads[n + 1].start() if n + 1 < len(heads) else len(text)
        f = {m.group(1): int(m.group(2)) for m in _FIELD.finditer(text, head.end(), end)}
        flags = _VMFLAGS.search(text, head.end(), end)
        out.append(Mapping(
            int(head.group(1), 16), int(head.group(2), 16), perms, head.group(6),
            f.get("Size", 0), f.get("KernelPageSize", 4), f.get("Rss", 0),
            f.get("AnonHugePages", 0), f.get("ShmemPmdMapped", 0),
            f.get("Shared_Hugetlb", 0), f.get("Private_Hugetlb", 0),
            int(head.group(4), 16), int(head.group(5)),
            frozenset(flags.group(1).split()) if flags else frozenset(),
            f.get("FilePmdMapped", 0)))
    return out


def hugetlb_pages(maps: list[Mapping], file_bytes: dict[int, int] | None = None) -> dict[int, int]:
    """Huge pages per page size (kB) that these mappings hold, each page once: a process can
    map one hugetlb file several times (ZGC maps its heap's memfd three times before JDK 21's
    generational mode: 3 GiB of mappings on 512 pages of 2 MiB), so the file's ranges are
    united by inode; anonymous mappings are each their own, rounded up to whole pages by mmap
    (Documentation/admin-guide/mm/hugetlbpage.rst). `file_bytes` (memfd_bytes) holds the size
    of such files by inode where it could be read: a file holds its pages whether mapped or not
    (JDK 11's ZGC maps 988 MiB of a 1 GiB heap file: 494 pages seen in smaps, 512 taken)."""
    out: dict[int, int] = {}
    ranges: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for m in maps:
        if not m.hugetlb or m.kernel_page_kb <= 4:
            continue
        kb = m.kernel_page_kb
        if m.shared and m.inode:
            ranges.setdefault((kb, m.inode), []).append(
                (m.offset, m.offset + m.size_kb * 1024))
        else:
            out[kb] = out.get(kb, 0) + -(-m.size_kb // kb)
    for (kb, inode), spans in ranges.items():
        covered, end = 0, -1
        for lo, hi in sorted(spans):
            lo = max(lo, end)
            if hi > lo:
                covered += hi - lo
                end = hi
        covered = max(covered, (file_bytes or {}).get(inode, 0))
        out[kb] = out.get(kb, 0) + -(-covered // (kb * 1024))
    return out


def memfd_bytes(sr: SysRoot, pid: int, maps: list[Mapping]) -> dict[int, int]:
    """The size of each hugetlb memfd a process maps, by inode, from the file itself
    (/proc/PID/map_files/START-END, which root can stat); empty on a captured tree."""
    out: dict[int, int] = {}
    if not sr.live:
        return out
    for m in maps:
        if m.hugetlb and m.shared and m.inode and m.path.startswith("/memfd:") \
                and m.inode not in out:
            try:
                out[m.inode] = os.stat(sr.path(f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}"))\
                    .st_size
            except OSError:
                pass
    return out


class Proc:
    """One process. Attributes read lazily; each is None when unreadable (not our process and
    not root, or the process exited meanwhile)."""

    def __init__(self, sr: SysRoot, pid: int):
        self.sr = sr
        self.pid = pid

    def _p(self, name: str) -> str:
        return f"/proc/{self.pid}/{name}"

    @cached_property
    def comm(self) -> str | None:
        text = self.sr.read(self._p("comm"), quiet_missing=True)
        return text.strip() if text is not None else None

    @cached_property
    def cmdline(self) -> tuple[str, ...]:
        text = self.sr.read(self._p("cmdline"), quiet_missing=True) or ""
        # Passwords on a command line never reach findings, JSON or the journal.
        return redact_args([a for a in text.split("\0") if a])

    @cached_property
    def status(self) -> dict[str, str]:
        return self.sr.read_kv(self._p("status"), quiet_missing=True) or {}

    @property
    def ppid(self) -> int | None:
        v = self.status.get("PPid")
        return int(v) if v else None

    @property
    def ns_pid(self) -> int:
        """Its PID in its own PID namespace (what its own files and logs say)."""
        from .roots import ns_pid
        return ns_pid(self.status, self.pid)

    @property
    def uid(self) -> int | None:
        v = self.status.get("Uid")
        return int(v.split()[0]) if v else None

    @property
    def started_at(self) -> float | None:
        """When the process started, in seconds since the epoch: field 22 of /proc/PID/stat
        (starttime, clock ticks after boot) plus the boot time, btime in /proc/stat (proc(5))."""
        stat = self.sr.read(self._p("stat"), quiet_missing=True)
        boot = self.sr.read("/proc/stat", quiet_missing=True, limit=1 << 16) or ""
        mt = re.search(r"^btime (\d+)", boot, re.M)
        if not stat or not mt:
            return None
        fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces
        try:
            return int(mt.group(1)) + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        except (IndexError, ValueError):
            return None

    @property
    def mems_allowed(self) -> tuple[int, ...] | None:
        """NUMA nodes the process's cpuset allows (cpuset.mems, systemd's AllowedMemoryNodes=):
        "Mems_allowed_list: 0-1,3" in status (Documentation/filesystems/proc.rst). A memory
        policy (numactl --membind) is not here: numa.py reads it from numa_maps."""
        v = self.status.get("Mems_allowed_list")
        return nodelist(v) if v else None

    @property
    def vm_pte_kb(self) -> int | None:
        return kb(self.status.get("VmPTE"))

    @property
    def rss_shmem_kb(self) -> int | None:
        return kb(self.status.get("RssShmem"))

    @property
    def hugetlb_kb(self) -> int | None:
        return kb(self.status.get("HugetlbPages"))

    @cached_property
    def smaps(self) -> list[Mapping] | None:
        text = self.sr.read(self._p("smaps"))
        return parse_smaps(text) if text is not None else None

    @cached_property
    def shared_mappings(self) -> list[Mapping] | None:
        text = self.sr.read(self._p("smaps"))
        return parse_smaps(text, shared_only=True) if text is not None else None

    def environ(self) -> dict[str, str] | None:
        text = self.sr.read(self._p("environ"))
        if text is None:
            return None
        return redact_environ(dict(e.partition("=")[::2] for e in text.split("\0") if "=" in e))


@dataclass(frozen=True)
class Backing:
    """What a set of mappings sits on: "hugetlb" (any on static huge pages), "thp" (any part
    mapped by THP, private or shmem), else "4k"; `page_kb` the page size that implies, and
    the kB on each."""
    kind: str
    page_kb: int
    hugetlb_kb: int
    thp_kb: int

    def held_pages(self, maps: list[Mapping], page_kb: int) -> int:
        """Huge pages of `page_kb` these mappings hold (hugetlb_pages)."""
        return hugetlb_pages(maps).get(page_kb, 0)


def backing_of(maps: list[Mapping], thp_page_kb: int, base_page_kb: int = 4) -> Backing:
    """The backing of a process's memory (or of one segment: pass just that mapping). The
    smaps fields are those of Documentation/filesystems/proc.rst: KernelPageSize > 4 kB or an
    /anon_hugepage path is hugetlb; AnonHugePages and ShmemPmdMapped count THP."""
    huge = [m for m in maps if m.hugetlb]
    thp = sum(m.anon_huge_kb + m.shmem_pmd_kb for m in maps)
    hugetlb_kb = sum(kb * n for kb, n in hugetlb_pages(huge).items()) or \
        sum(m.size_kb for m in huge)
    if huge:
        return Backing("hugetlb", max(m.kernel_page_kb for m in huge), hugetlb_kb, thp)
    if thp:
        return Backing("thp", thp_page_kb, 0, thp)
    return Backing("4k", base_page_kb, 0, 0)


def binary_version(sr: SysRoot, pid: int, pattern: str, args: tuple[str, ...] = ("--version",),
                   argv0: str | None = None) -> str | None:
    """A running server's version from its own binary (/proc/PID/exe) when nothing else tells:
    the first group of `pattern` in what `exe ARGS` prints (~30 ms). argv0 keeps the name the
    process was started by, for binaries that pick their role from it. None offline."""
    import subprocess
    from .roots import RootGone, exe_of, root_of
    exe = exe_of(sr, pid)  # the path in its own root, where it runs chrooted below
    if not exe or not sr.live:
        return None
    # A server in a root of its own runs its own binary with its own libraries there (a
    # binary of another distribution may not even load on the host): chroot into it.
    root = root_of(sr, pid)
    try:
        base = root.base() if root else None
    except RootGone:
        return None

    def enter() -> None:
        if base:
            os.chroot(base)
            os.chdir("/")
    try:
        r = subprocess.run([argv0 or exe, *args], executable=exe, capture_output=True,
                           text=True, timeout=10, cwd="/", preexec_fn=enter if base else None)
    except (OSError, subprocess.TimeoutExpired):
        return None
    mt = re.search(pattern, r.stdout + r.stderr)
    return mt.group(1) if mt else None


def proc_state(pid: int) -> str:
    """The live process's state letter from /proc/PID/stat ("Z" zombie), "?" if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def exited(pid: int) -> bool:
    """Whether `pid` has exited: gone, or a zombie waiting for its parent to reap it, whose
    memory (huge pages too) is already freed: kernel/exit.c do_exit() runs exit_mm() before
    exit_notify()."""
    return proc_state(pid) in ("Z", "X", "?")


def systemd_unit(pid: int) -> str | None:
    """The service unit of live `pid` when systemd is PID 1 (sd_booted: /run/systemd/system)."""
    import os
    if not os.path.isdir("/run/systemd/system"):
        return None
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            text = f.read()
    except OSError:
        return None
    mt = re.search(r"/([^/]+\.service)(?:/|$)", text)
    if not mt:
        return None
    # A process in a service's cgroup is not always that service's own: a server started by
    # hand from a script that a unit runs sits in the unit's cgroup too, and restarting the
    # unit would restart the script. The unit is the server's only when its main process is
    # the server (the unit property MainPID: org.freedesktop.systemd1(5)).
    import subprocess
    try:
        r = subprocess.run(["systemctl", "show", "--property=MainPID", "--value", mt.group(1)],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return mt.group(1)
    main = r.stdout.strip()
    if r.returncode == 0 and main.isdigit() and int(main) != pid:
        return None
    return mt.group(1)


class ProcTable:
    def __init__(self, sr: SysRoot):
        self.sr = sr
        self._users: dict[int, dict[int, str]] = {}  # by id() of the SysRoot read
        self._views: dict = {}  # pid or a root's (dev, ino) -> its SysRoot

    @cached_property
    def all(self) -> list[Proc]:
        return [Proc(self.sr, int(n)) for n in self.sr.listdir("/proc") if n.isdigit()]

    def by_name(self, *names: str) -> list[Proc]:
        """Processes whose comm (the executable's name, kernel-truncated to 15 characters) is one
        of `names`. comm survives argv rewriting such as PostgreSQL's "postgres: checkpointer"."""
        wanted = {n[:15] for n in names}
        return [p for p in self.all if p.comm in wanted]

    def children(self, pid: int) -> list[Proc]:
        return [p for p in self.all if p.ppid == pid]

    def user(self, uid: int | None, fs: SysRoot | None = None) -> str | None:
        """The name of `uid` in the passwd file of the root `fs` reads (the host's by
        default): a server in its own root is named by its own users, never the host's."""
        from .roots import users
        if uid is None:
            return None
        fs = fs or self.sr
        if id(fs) not in self._users:
            self._users[id(fs)] = users(fs)
        return self._users[id(fs)].get(uid, str(uid))

    def fs(self, pid: int) -> SysRoot:
        """The files of process `pid` as it sees them (roots.view), one view per root."""
        from .roots import proc_root, view
        if pid not in self._views:
            fs = view(self.sr, pid)
            root = proc_root(fs)
            if root is not None:  # the processes of one root and mount namespace share one
                fs = self._views.setdefault((root.dev, root.ino, root.mntns), fs)
            self._views[pid] = fs
        return self._views[pid]

    def owner(self, p: Proc) -> str | None:
        """The name of the process's uid as its own root names it: its uid as its own user
        namespace numbers it (uid_map), looked up in its own root's passwd file."""
        from .userns import inside_uid
        return self.user(inside_uid(self.sr, p.pid, p.uid), self.fs(p.pid))


# ELF e_machine (include/uapi/linux/elf-em.h) as `uname -m` names it; EM_PPC64 is ppc64le when
# the header says little-endian (EI_DATA = ELFDATA2LSB).
_EM = {62: "x86_64", 183: "aarch64", 21: "ppc64", 22: "s390x", 243: "riscv64",
       258: "loongarch64"}


def machine_of(sr: SysRoot, pid: int) -> str | None:
    """The architecture a process runs as: its own binary's ELF header (/proc/PID/exe; on a
    live host, or a tree that keeps the file itself), else the kernel's (/proc/sys/kernel/arch
    where the kernel has it); None when neither can be read."""
    exe = sr.path(f"/proc/{pid}/exe")
    if sr.live or not os.path.islink(exe):
        try:
            with open(exe, "rb") as fh:
                head = fh.read(20)
        except OSError:
            head = b""
        if len(head) == 20 and head[:4] == b"\x7fELF" and head[5] in (1, 2):
            em = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
            name = _EM.get(em)
            return name + "le" if name == "ppc64" and head[5] == 1 else name
    arch = (sr.read("/proc/sys/kernel/arch", quiet_missing=True) or "").strip()
    return arch or None


def start_time(pid: int | None) -> float | None:
    """When live `pid` started (Proc.started_at), to 10 ms: with the PID, what tells the
    process apart from a later one that got the same PID."""
    t = Proc(SysRoot("/"), pid).started_at if pid else None
    return round(t, 2) if t is not None else None
