"""Ids as a process's own user namespace numbers them: a container whose ids are shifted
(its root's uid 0 is the host's 100000, its `mysql` 999 the host's 100999) names its users
by its own numbers, in its own root's passwd file."""

from __future__ import annotations

from .sysroot import SysRoot


def inside_uid(sr: SysRoot, pid: int, uid: int | None) -> int | None:
    """A host uid as process `pid`'s user namespace numbers it: each line of
    /proc/PID/uid_map maps `count` ids from `outside` on to `inside` on
    (user_namespaces(7)); the identity map "0 0 4294967295" of the initial namespace changes
    nothing. A uid the map does not cover, or an unreadable map, stays as it is."""
    if uid is None:
        return None
    for line in (sr.read(f"/proc/{pid}/uid_map", quiet_missing=True) or "").splitlines():
        f = line.split()
        if len(f) == 3 and all(x.isdigit() for x in f):
            inside, outside, count = map(int, f)
            if outside <= uid < outside + count:
                return uid - outside + inside
    return uid
