"""The one way hpadvise reads the system.

Every read of /proc, /sys and /etc goes through a :class:`SysRoot`. The default root is "/";
tests and offline audits point it at a captured tree (``hpadvise snapshot`` writes one).
Like psutil's configurable procfs root, this keeps every parser testable on real captures.

A missing or unreadable file is never an exception here: it reads as ``None`` and leaves a
:class:`Note` saying which path and why, so a container with a masked /sys still gets a report.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from ..kit.knob_id import size_of_dir


@dataclass(frozen=True)
class Note:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def snapshot_top(root: str) -> str:
    """--root as one absolute path without a trailing slash; "/" for the live host (also
    given as "" or "/.")."""
    return "/" if root in ("", "/") else os.path.abspath(root).rstrip("/") or "/"


def snapshot_root(root: str) -> str:
    """`root` (as snapshot_top gives it) if it is "/" or a tree `hpadvise snapshot` wrote;
    else an InputError."""
    from ..kit.errors import InputError
    if snapshot_top(root) == "/":
        return "/"
    if not os.path.isdir(root):
        raise InputError(f"--root {root}: no such directory; give a directory written by "
                         "`hpadvise snapshot`")
    if not os.path.isfile(os.path.join(root, "proc/meminfo")):
        raise InputError(f"--root {root}: not a snapshot (no proc/meminfo in it); make one "
                         "with `hpadvise snapshot DIR`")
    return snapshot_top(root)


def parse_kv(text: str) -> dict[str, str]:
    """``Key: value`` lines (meminfo, status, smaps_rollup) as a dict of strings."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


class SysRoot:
    def __init__(self, root: str | os.PathLike = "/", *, record: bool = False):
        self.root = Path(root)
        self.notes: list[Note] = []
        # Contents of the files read successfully, kept when recording a snapshot.
        self.recorded: dict[str, bytes] | None = {} if record else None
        self.listed: set[str] | None = set() if record else None
        self.names: dict[str, list[str]] = {}  # listed directories under /etc: their names
        # links read (a process's cwd and exe), kept when recording: a snapshot writes them
        self.links: dict[str, str] | None = {} if record else None

    @property
    def live(self) -> bool:
        """True when this reads the running host, not a captured tree."""
        return self.root == Path("/")

    def or_offline(self, advice: str) -> str:
        """Advice to connect (--dsn), for the live host; a snapshot, which holds no
        connection and takes no --dsn, is told where the running values are read."""
        return advice if self.live else ("A snapshot holds no connection: check on the host "
                                          "itself reads the running values.")

    def path(self, p: str) -> Path:
        return self.root / p.lstrip("/")

    def _fail(self, p: str, exc: OSError, quiet_missing: bool) -> None:
        if quiet_missing and exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return
        reason = exc.strerror or type(exc).__name__
        if exc.errno == errno.EACCES or exc.errno == errno.EPERM:
            reason = "permission denied (run as root to see it)"
        elif exc.errno == errno.ENOENT:
            reason = "missing"
        self.notes.append(Note(p, reason))

    def read(self, p: str, *, quiet_missing: bool = False, limit: int | None = None) -> str | None:
        """Text of a file, or None (with a note unless it is simply absent and that is normal)."""
        try:
            with open(self.path(p), "rb") as f:
                data = f.read(limit) if limit else f.read()
        except OSError as exc:
            self._fail(p, exc, quiet_missing)
            return None
        if self.recorded is not None:
            self.recorded[p] = data
        return data.decode("utf-8", "replace")

    def read_bytes(self, p: str, *, quiet_missing: bool = False) -> bytes | None:
        """A binary file's bytes (a compressed kernel config), or None like read()."""
        try:
            with open(self.path(p), "rb") as f:
                data = f.read()
        except OSError as exc:
            self._fail(p, exc, quiet_missing)
            return None
        if self.recorded is not None:
            self.recorded[p] = data
        return data

    def read_tail(self, p: str, nbytes: int, *, quiet_missing: bool = False) -> str | None:
        """The last `nbytes` of a file that may be large (a server's error log), from a line
        start; None like read()."""
        try:
            with open(self.path(p), "rb") as f:
                size = f.seek(0, 2)
                f.seek(max(0, size - nbytes))
                data = f.read()
        except OSError as exc:
            self._fail(p, exc, quiet_missing)
            return None
        if size > nbytes:
            data = data.split(b"\n", 1)[-1]
        if self.recorded is not None:
            self.recorded[p] = data
        return data.decode("utf-8", "replace")

    def read_int(self, p: str, *, quiet_missing: bool = False) -> int | None:
        text = self.read(p, quiet_missing=quiet_missing)
        if text is None:
            return None
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            self.notes.append(Note(p, f"not an integer: {text.strip()[:40]!r}"))
            return None

    def read_kv(self, p: str, *, quiet_missing: bool = False) -> dict[str, str] | None:
        """Parse ``Key: value`` lines (meminfo, status, smaps_rollup) into a dict of strings."""
        text = self.read(p, quiet_missing=quiet_missing)
        return None if text is None else parse_kv(text)

    def listdir(self, p: str, *, quiet_missing: bool = True) -> list[str]:
        try:
            names = sorted(os.listdir(self.path(p)))
        except OSError as exc:
            self._fail(p, exc, quiet_missing)
            return []
        if self.listed is not None:
            self.listed.add(p)
            if p.startswith("/etc/"):  # names that are the fact (a unit linked into .wants)
                self.names[p] = names
        return names

    def exists(self, p: str) -> bool:
        try:
            return self.path(p).exists()
        except OSError:  # Python 3.11 raises for EACCES on a parent directory
            return False

    def readlink(self, p: str) -> str | None:
        """A link's target; in a snapshot, where `hpadvise snapshot` keeps a link as a file
        holding its target, that file's text."""
        try:
            target = os.readlink(self.path(p))
        except OSError as exc:
            if exc.errno == errno.EINVAL and not self.live and self.path(p).is_file():
                return self.path(p).read_text(errors="replace").strip() or None
            self._fail(p, exc, quiet_missing=True)
            return None
        if self.links is not None:
            self.links[p] = target
        return target


def nodelist(text: str) -> tuple[int, ...]:
    """"0-1,3" as (0, 1, 3): the kernel's list format (Documentation/admin-guide/cgroup-v2.rst,
    cpuset.mems)."""
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        if a.isdigit() and (not b or b.isdigit()):
            out += range(int(a), int(b or a) + 1)
    return tuple(sorted(set(out)))


def kb(value: str | None) -> int | None:
    """'1234 kB' -> 1234 (the unit in /proc files is always kB, i.e. KiB)."""
    if value is None:
        return None
    try:
        return int(value.split()[0])
    except (ValueError, IndexError):
        return None


def size_dirs(sr: SysRoot, base: str) -> list[tuple[int, str]]:
    """The hugepages-<N>kB directories under `base` (a pool's or a THP size's), by size."""
    out = []
    for name in sr.listdir(base):
        kb = size_of_dir(name)
        if kb is not None:
            out.append((kb, f"{base}/{name}"))
    return sorted(out)


# While apply plans for a snapshot (apply --root): the snapshot's directory, under which a
# server that shares its host's root has its files (roots.reach)
_PLANNED: ContextVar[str | None] = ContextVar("planned_snapshot", default=None)


@contextmanager
def planning_snapshot(top: str):
    """Paths of the servers on a snapshot's own host reached inside it meanwhile."""
    token = _PLANNED.set(top)
    try:
        yield
    finally:
        _PLANNED.reset(token)


def planned_snapshot() -> str | None:
    return _PLANNED.get()
