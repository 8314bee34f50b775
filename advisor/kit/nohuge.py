"""A helper process that cannot take pages from the host's huge page pools.

hpadvise runs throwaway PostgreSQL processes to ask them questions: `size` runs initdb into a
scratch directory, validate makes its scratch clusters with it. initdb's test runs (`postgres
--check`), its bootstrap and its single-user backends each create shared memory under
PostgreSQL's default `huge_pages = try`, and where a pool has free pages they take them (mmap
with MAP_HUGETLB, then ordinary pages if that fails: CreateAnonymousSegment in
src/backend/port/sysv_shmem.c). Measured: `size postgres` on PostgreSQL 15 held 60-65 of 100
free 2 MiB pages reserved while its initdb ran. A pool's free pages are the host's (a stopped
cluster's kept pages, a server about to start): a database that starts with `huge_pages = on`
in that moment fails. initdb takes `-c huge_pages=off` from PostgreSQL 16 only, so the helper
is started under a seccomp filter instead: mmap with MAP_HUGETLB fails with ENOMEM, and
`try` falls back to ordinary pages. The filter passes to every process the helper starts and
ends with them (Documentation/userspace-api/seccomp_filter.rst); it changes nothing of the
host's.

The filter is installed by a small launcher (this interpreter's own binary, isolated, then
exec), not in a preexec_fn, which is unsafe where the parent runs threads (the subprocess
module's docs). On an architecture the filter does not know, a Python without ctypes, a
kernel that refuses the filter, or where the helper's user cannot run the interpreter (one in
root's home, the helper run as `postgres`), the helper runs without it, as before.
"""

from __future__ import annotations

import os
import subprocess
import sys

# The launcher: standard library only, run with -I -S. Constants: include/uapi/linux/
# filter.h and bpf_common.h (BPF_LD|BPF_W|BPF_ABS 0x20, BPF_JMP|BPF_JEQ|BPF_K 0x15,
# BPF_JMP|BPF_JSET|BPF_K 0x45, BPF_RET|BPF_K 0x06), seccomp.h (struct seccomp_data: nr at
# 0, arch at 4, args[] from 16, so the low half of mmap's flags, args[3], at 40 on these
# little-endian machines; SECCOMP_RET_ERRNO 0x00050000, SECCOMP_RET_ALLOW 0x7fff0000;
# SECCOMP_MODE_FILTER 2), prctl.h (PR_SET_SECCOMP 22, PR_SET_NO_NEW_PRIVS 38),
# audit.h (AUDIT_ARCH_X86_64 0xC000003E, AUDIT_ARCH_AARCH64 0xC00000B7), the syscall tables
# (mmap: 9 on x86-64, 222 on arm64), mman.h (MAP_HUGETLB 0x40000 on both), errno.h
# (ENOMEM 12).
LAUNCHER = r"""
import os, sys
try:
    import ctypes, platform
    arch, nr = {"x86_64": (0xC000003E, 9), "aarch64": (0xC00000B7, 222)}[platform.machine()]

    class F(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                    ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class P(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(F))]
    prog = (F * 8)(F(0x20, 0, 0, 4), F(0x15, 0, 5, arch), F(0x20, 0, 0, 0),
                   F(0x15, 0, 3, nr), F(0x20, 0, 0, 40), F(0x45, 0, 1, 0x40000),
                   F(0x06, 0, 0, 0x00050000 | 12), F(0x06, 0, 0, 0x7FFF0000))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                           ctypes.c_ulong]
    if libc.prctl(38, 1, None, 0, 0) == 0:
        libc.prctl(22, 2, ctypes.cast(ctypes.pointer(P(8, prog)), ctypes.c_void_p), 0, 0)
except Exception:  # no filter for this machine or Python: the helper runs as before
    pass
os.execv(sys.argv[1], sys.argv[1:])
"""


def without_huge_pages(cmd: list[str]) -> list[str]:
    """`cmd` (its program as a path) started so that neither it nor what it starts can map
    huge pages. The interpreter by its real path: a virtual environment's `python` is a link
    into a directory the helper's user may not enter."""
    return [os.path.realpath(sys.executable), "-I", "-S", "-c", LAUNCHER, *cmd]


def run_without_huge_pages(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, **kw), without huge pages where the launcher can be started."""
    try:
        return subprocess.run(without_huge_pages(cmd), **kw)
    except PermissionError:  # the interpreter is out of the helper's user's reach
        return subprocess.run(cmd, **kw)
