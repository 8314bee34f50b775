"""A server's own root: its files, users and sockets as the server sees them.

A server in a container, a chroot or a root of another distribution has a root directory of its
own, and often mount and PID namespaces of its own. /proc/PID/root is that root as the process
sees it, mounts of its namespace included (proc(5), "/proc/pid/root"). Two things make reading
through it more than a prefix:

- The kernel resolves a symbolic link met under /proc/PID/root against the *reader's* root, so an
  absolute link inside the server's root (Debian's /etc/mysql/my.cnf -> /etc/alternatives/my.cnf,
  /var/run -> /run) would lead back to the host's files. `resolve_in` follows links one
  component at a time against the server's root, as openat2(2)'s RESOLVE_IN_ROOT does.
- A uid means what the server's own /etc/passwd says: the host may call uid 100 "messagebus"
  where the server's root calls it "postgres".

`ProcRoot` says where a root is and is kept in the journal (to_spec / from_spec), so that a
rollback reaches the same files after the server restarted under another PID. `view` gives the
SysRoot through which an engine reads a server's files: the host's own for a server that shares
hpadvise's root (nothing changes there), a `RootView` otherwise.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from .sysroot import Note, SysRoot, planned_snapshot

MAX_LINKS = 40  # links followed in one path (the kernel's own bound: MAXSYMLINKS, namei.c)


class RootGone(OSError):
    """The root a journaled change was made in cannot be reached any more."""


def resolve_in(base: str, path: str) -> str:
    """`path` as the process whose root is `base` sees it, as a path under `base`: every
    symbolic link is followed inside `base` ('..' stops at it), the last component too."""
    parts = [p for p in path.split("/") if p]
    done: list[str] = []
    links = 0
    while parts:
        name = parts.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(base, *done, name)
        try:
            st = os.lstat(here)
        except OSError:  # the rest cannot be links we could read: keep it as written
            done.append(name)
            done += parts
            break
        if not stat.S_ISLNK(st.st_mode):
            done.append(name)
            continue
        links += 1
        if links > MAX_LINKS:
            raise OSError(40, f"too many levels of symbolic links in {path}")  # ELOOP
        target = os.readlink(here)
        if target.startswith("/"):
            done = []
        parts = [p for p in target.split("/") if p] + parts
    return os.path.join(base, *done)


def _ident(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _ns(pid: int | str, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


@dataclass(frozen=True)
class ProcRoot:
    """The root directory of a process that is not hpadvise's own."""
    pid: int  # a process of the server that has it (host PID)
    dev: int
    ino: int
    host_path: str | None  # the same directory as the host names it, where it shows there
    own_pidns: bool  # a PID namespace of its own: its PIDs are not the host's
    own_mntns: bool
    # its mount namespace ("mnt:[N]"): two containers can share one root directory and still
    # see different mounts in it (each its own /run, its own volumes)
    mntns: str | None = None

    def base(self) -> str:
        """A host path that reaches the root now: the process's /proc/PID/root while it
        lives with this root, else any process's with the same root, else the host's
        directory. RootGone when none is the same directory any more."""
        if self._mine(self.pid):
            return f"/proc/{self.pid}/root"
        for n in os.listdir("/proc"):
            if n.isdigit() and self._mine(n):
                return f"/proc/{n}/root"
        if self.host_path and _ident(self.host_path) == (self.dev, self.ino):
            return self.host_path
        raise RootGone(2, f"the root {self.describe()} is gone (no process runs in it and "
                          "the host does not show it)")

    def _mine(self, pid: int | str) -> bool:
        """Process `pid` has this root, in this mount namespace where one was recorded."""
        return _ident(f"/proc/{pid}/root") == (self.dev, self.ino) and \
            (self.mntns is None or _ns(pid, "mnt") == self.mntns)

    def reach(self, path: str) -> str:
        """The host path of `path` inside this root, links followed inside it."""
        return resolve_in(self.base(), path)

    def describe(self) -> str:
        where = self.host_path or f"of process {self.pid}"
        ns = ", its own PID namespace" if self.own_pidns else ""
        return f"{where}{ns}"

    def to_spec(self) -> dict:
        return {"pid": self.pid, "dev": self.dev, "ino": self.ino, "host_path": self.host_path,
                "own_pidns": self.own_pidns, "own_mntns": self.own_mntns, "mntns": self.mntns}

    @classmethod
    def from_spec(cls, spec: dict | None) -> ProcRoot | None:
        if not spec:
            return None
        return cls(int(spec["pid"]), int(spec["dev"]), int(spec["ino"]), spec.get("host_path"),
                   bool(spec.get("own_pidns")), bool(spec.get("own_mntns")), spec.get("mntns"))


def _root_mount(pid: int | str) -> tuple[str, ...] | None:
    """What is mounted at a process's "/", from its mount table: (device, root of the mount
    in its file system, type, source) of the line whose mount point is "/" (proc(5),
    /proc/PID/mountinfo); () where none is (a chroot into a directory); None: unreadable."""
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):  # the last mount over "/" is the one seen
        head, _, tail = line.partition(" - ")
        fields = head.split()
        if len(fields) > 4 and fields[4] == "/":
            return (fields[2], fields[3], *tail.split()[:2])
    return ()


def hidden(sr: SysRoot, pid: int) -> bool:
    """Process `pid` has another root than hpadvise (a container's, a chroot), which this user
    cannot enter: /proc/PID/root needs the right to trace it, but its mount table, readable by
    all, says what is mounted at its "/" (a service in a mount namespace of its own, with a
    private /tmp, still has the host's root there)."""
    if not sr.live or _ident(f"/proc/{pid}/root") is not None:
        return False
    theirs = _root_mount(pid)
    return theirs is not None and theirs != _root_mount("self")


def root_of(sr: SysRoot, pid: int) -> ProcRoot | None:
    """The root of live process `pid` when it is not the one hpadvise runs in; None when it
    is the same (the common case), on a snapshot, or where /proc/PID/root cannot be entered
    (not root: `hidden` then says whether the process has another root)."""
    if not sr.live:
        return None
    mine, theirs = _ident("/proc/self/root"), _ident(f"/proc/{pid}/root")
    if mine is None or theirs is None or mine == theirs:
        return None
    try:
        shown = os.readlink(f"/proc/{pid}/root")
    except OSError:
        shown = None
    host_path = shown if shown and shown != "/" and _ident(shown) == theirs else None
    mnt = _ns(pid, "mnt")
    return ProcRoot(pid, theirs[0], theirs[1], host_path,
                    _ns(pid, "pid") not in (None, _ns("self", "pid")),
                    mnt not in (None, _ns("self", "mnt")), mnt)


class _Under(dict):
    """What a view records for a snapshot, kept in the host's record under the server's
    /proc/PID/root, where an offline audit of the snapshot reads it back (view)."""

    def __init__(self, target, prefix: str):
        super().__init__()
        self.target, self.prefix = target, prefix

    def __setitem__(self, key, value) -> None:
        self.target[self.prefix + key] = value

    def add(self, key) -> None:  # as the host's set of listed directories
        self.target.add(self.prefix + key)


class SnapshotRoot(ProcRoot):
    """A server's root as a snapshot kept it: the files read through it, under proc/PID/root
    of the snapshot's tree."""

    def base(self) -> str:
        return self.host_path or ""

    def describe(self) -> str:
        return f"of process {self.pid} (as the snapshot kept it)"


class RootView(SysRoot):
    """The files of one root, read as its processes see them. Notes go to the host's SysRoot,
    each naming the root; what a recording SysRoot's view reads goes into the snapshot under
    /proc/PID/root."""

    def __init__(self, host: SysRoot, root: ProcRoot):
        super().__init__("/")
        self.host, self.proc_root = host, root
        self.notes = host.notes
        self._base = root.base()
        if host.recorded is not None and host.live:
            prefix = f"/proc/{root.pid}/root"
            self.recorded = _Under(host.recorded, prefix)
            self.listed = _Under(host.listed, prefix)
            self.names = _Under(host.names, prefix)

    @property
    def live(self) -> bool:
        return self.host.live

    def path(self, p: str) -> Path:
        return Path(resolve_in(self._base, p))

    def _fail(self, p: str, exc: OSError, quiet_missing: bool) -> None:
        before = len(self.notes)
        super()._fail(p, exc, quiet_missing)
        if len(self.notes) > before:
            n = self.notes[-1]
            self.notes[-1] = Note(f"{n.path} (in the root {self.proc_root.describe()})",
                                  n.reason)

    def readlink(self, p: str) -> str | None:
        try:  # the link's own text, as the server reads it
            return os.readlink(resolve_in(self._base, os.path.dirname(p.rstrip("/")))
                               + "/" + os.path.basename(p.rstrip("/")))
        except OSError as exc:
            self._fail(p, exc, quiet_missing=True)
            return None


class HiddenView(SysRoot):
    """The files of a process in a root this user cannot enter: every read is refused with a
    note, so that nothing of the host's files of the same names is taken for its own."""
    hidden = True

    def __init__(self, host: SysRoot, pid: int):
        super().__init__("/")
        self.notes, self.pid = host.notes, pid

    def path(self, p: str) -> Path:
        # out of reach: a path no host has, so that nothing of the host's is found for it
        return Path(f"/nonexistent/hpadvise-out-of-reach/{self.pid}") / p.lstrip("/")

    def _refuse(self, p: str) -> None:
        self.notes.append(Note(p, f"in the root of process {self.pid}, which only root can "
                                  "read (run as root)"))

    def read(self, p, *, quiet_missing=False, limit=None):
        self._refuse(p)

    def read_bytes(self, p, *, quiet_missing=False):
        self._refuse(p)

    def read_tail(self, p, nbytes, *, quiet_missing=False):
        self._refuse(p)

    def listdir(self, p, *, quiet_missing=True):
        self._refuse(p)
        return []

    def exists(self, p: str) -> bool:
        return False

    def readlink(self, p: str):
        self._refuse(p)


def as_seen_inside(root: ProcRoot | None, path: str | None) -> str | None:
    """A path the kernel names as the host sees it (/proc/PID/cwd), as the process's own root
    names it: itself for a process that shares hpadvise's root; None where it cannot be told
    (a mount namespace of its own, where a volume's path is not the host's, or a path
    outside the root's directory on the host)."""
    if root is None or not path:
        return path
    if root.own_mntns or not root.host_path:
        return None
    rel = os.path.relpath(path, root.host_path)
    return None if rel.startswith("..") else "/" if rel == "." else "/" + rel


def exe_of(sr: SysRoot, pid: int) -> str | None:
    """The path of a process's binary as the process itself names it: /proc/PID/exe, which the
    kernel writes as the host reaches it (under the root's directory on the host, for a chroot),
    turned into its own root's path ("/usr/lib/postgresql/17/bin/postgres")."""
    exe = sr.readlink(f"/proc/{pid}/exe")
    if not exe:
        return None
    exe = exe.removesuffix(" (deleted)")
    root = root_of(sr, pid)
    if root is not None and root.host_path:
        rel = os.path.relpath(exe, root.host_path)
        if not rel.startswith(".."):
            return "/" + rel
    return exe


def view(sr: SysRoot, pid: int | None) -> SysRoot:
    """The SysRoot through which to read the files of process `pid`: `sr` itself unless the
    process has a root of its own (a HiddenView where this user cannot enter it)."""
    if pid and not sr.live and sr.path(f"/proc/{pid}/root").is_dir():  # what a snapshot kept
        kept = sr.path(f"/proc/{pid}/root")
        st = kept.stat()  # its identity: a journaled path in it is found there again
        return RootView(sr, SnapshotRoot(pid, st.st_dev, st.st_ino, str(kept), False, False))
    root = root_of(sr, pid) if pid else None
    if root is None:
        return HiddenView(sr, pid) if pid and hidden(sr, pid) else sr
    try:
        return RootView(sr, root)
    except RootGone:
        return sr


def proc_root(fs: SysRoot) -> ProcRoot | None:
    """The root a view reads, None for the host's own."""
    return fs.proc_root if isinstance(fs, RootView) else None


def reach(root_spec: dict | None, path: str | None) -> str | None:
    """A journaled path in its root (the spec ProcRoot.to_spec wrote), as the host reaches it
    now; the path itself where the server shares the host's root (inside the snapshot while
    apply plans for one)."""
    root = ProcRoot.from_spec(root_spec)
    if path is None:
        return path
    if root is None:
        top = planned_snapshot()
        return path if top is None else os.path.join(top, path.lstrip("/"))
    return root.reach(path)


def users(fs: SysRoot) -> dict[int, str]:
    """uid -> name from the passwd file of the root `fs` reads (the first name of each uid)."""
    out: dict[int, str] = {}
    for line in (fs.read("/etc/passwd", quiet_missing=True) or "").splitlines():
        parts = line.split(":")
        if len(parts) > 2 and parts[2].isdigit():
            out.setdefault(int(parts[2]), parts[0])
    return out


def ns_pid(status: dict[str, str], pid: int) -> int:
    """The process's PID in its own PID namespace: the last number of NSpid in
    /proc/PID/status (proc(5)); `pid` where there is none (kernels before 4.1)."""
    ids = status.get("NSpid", "").split()
    return int(ids[-1]) if ids and ids[-1].isdigit() else pid


def restart_advice(iid: str, root: ProcRoot, main: bool, command: str | None) -> str:
    """What apply says instead of restarting a server in a root of its own: hpadvise never
    restarts it behind whatever runs it there (a container runtime would see its container
    die, or restart it with the old settings). `main`: the server is its PID namespace's
    first process (the container's main process); `command`: the engine's restart command
    as run inside the root."""
    head = f"{iid} runs in the root {root.describe()}: apply does not restart it; "
    if main:
        return head + ("restart its container through its runtime (docker restart, podman "
                       "restart, kubectl delete pod ...) so that it starts on the new settings")
    if not command:
        return head + ("restart it through whatever started it there (its container runtime, "
                       "its init, its script), then run check to see it on huge pages")
    ns = "--mount --pid" if root.own_pidns else "--mount"
    return head + (f"restart it where it runs: nsenter --target {root.pid} {ns} --root --wd "
                   f"-- {command} (or through whatever started it there)")


def view_of_spec(root_spec: dict | None) -> SysRoot:
    """The SysRoot of a journaled root (ProcRoot.to_spec), the host's where there is none."""
    root = ProcRoot.from_spec(root_spec)
    return RootView(SysRoot("/"), root) if root is not None else SysRoot("/")
