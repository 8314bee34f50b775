"""The processes of a server in a root of its own (tests/roots.py): its PID namespace, whether it
lives, its huge pages, every process whose root is the root."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def ns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _status(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    return _status(pid).get("State", "Z")[:1] not in ("Z", "X")


def kill_all(left, tries: int = 100) -> None:
    """SIGKILL what `left()` lists until it lists nothing (10 s at most)."""
    for _ in range(tries):
        pids = left()
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def held_pages(pid: int, page_kb: int = 2048) -> int:
    """Huge pages of `page_kb` a process's mappings hold, touched or only reserved: the sizes
    of its mappings on such pages (smaps: Size, KernelPageSize)."""
    kb = size = 0
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if line.startswith("Size:"):
            size = int(line.split()[1])
        elif line.startswith("KernelPageSize:") and int(line.split()[1]) == page_kb:
            kb += size
    return kb // page_kb


def procs_in(root: Path) -> list[int]:
    """Host PIDs of every process whose root directory is `root` or inside it."""
    out = []
    r = str(root)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            link = os.readlink(f"/proc/{d}/root")
        except OSError:
            continue
        if link == r or link.startswith(r + "/"):
            out.append(int(d))
    return out
