"""CPU placement for the simultaneous design: the CPUs split into equal groups, servers and
their clients pinned to a group, and the grid on which they trade groups within a run."""

from __future__ import annotations

import os
import subprocess
from typing import Callable

from hpadvise.api.face import ProcTable, SysRoot

ALL_CPUS = sorted(os.sched_getaffinity(0))


def cpu_groups(n: int) -> list[list[int]]:
    """The CPUs we may use, split into n groups of equal size (the rest unused)."""
    each = max(1, len(ALL_CPUS) // max(1, n))
    return [ALL_CPUS[i * each:(i + 1) * each] for i in range(n)]


def pin_trees(sr: SysRoot, pins: list[tuple[int | None, object]]) -> None:
    """Pin servers, (pid, cpus) each: every thread of its main process and of its children
    (sched_setaffinity(2) is per thread; processes forked later, like PostgreSQL's backends,
    inherit the mask). One read of the process table serves every server."""
    table = ProcTable(sr)
    for pid, cpus in pins:
        if not pid:
            continue
        for p in [pid] + [c.pid for c in table.children(pid)]:
            try:
                tids = os.listdir(f"/proc/{p}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    os.sched_setaffinity(int(tid), cpus)
                except OSError:  # a thread that just ended
                    pass


def start_pinned(start: Callable[[], subprocess.Popen], cpus) -> subprocess.Popen:
    """Start a driver on `cpus` (None: anywhere): the child inherits our mask at fork, so no
    thread of it ever runs elsewhere; our own mask is put back at once."""
    if cpus is None:
        return start()
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        return start()
    finally:
        os.sched_setaffinity(0, old)


def turn(now: float, warm_s: float, swap_s: float) -> int:
    """How many times the servers have traded CPUs `now` seconds into a run that swaps every
    swap_s seconds: on a grid through the end of the warm-up, so that the measured part is cut
    into whole swap_s pieces and each server spends an equal share of it on every CPU group
    when it holds a multiple of (servers) pieces."""
    first = warm_s % swap_s or swap_s
    return 0 if now < first else int((now - first) // swap_s) + 1


def trade(sr: SysRoot, groups: list, pids: list[int | None], clients: list[int],
          k: int) -> list[bool]:
    """Trade number k: server i and its client on group (i + k) mod n; whether each took
    (read back off the server's main process and its client)."""
    on = [(groups[(i + k) % len(groups)], (pids[i], clients[i])) for i in range(len(clients))]
    pin_trees(sr, [(pid, cpus) for cpus, both in on for pid in both])
    took = []
    for cpus, both in on:
        try:
            took.append(all(os.sched_getaffinity(x) == set(cpus) for x in both))
        except OSError:  # the client just ended
            took.append(False)
    return took
