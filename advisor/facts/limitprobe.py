"""Measuring the hugetlb fault limit hpadvise's own cgroup meets (opt-in: `check
--measure-limits`). Inside a cgroup namespace the cgroups above are out of sight, and so are
their limits (a Kubernetes pod's); a fault past any of them is a SIGBUS. A child process maps
huge pages and touches them one at a time, up to what an instance still needs, and reports each
touch through a pipe: it ends at the need, or is killed by SIGBUS at the limit. Its pages are
freed when it exits.

It takes only free, unreserved pages of the pool: the mapping reserves its pages at mmap()
(without MAP_NORESERVE, Documentation/admin-guide/mm/hugetlbpage.rst), and it asks for no more
than the pool's free pages minus those reserved by others, so no server's reserved pages are
ever taken. A reservation limit below the mapping (`hugetlb.<size>.rsvd.max`) makes mmap()
fail: said as such.
"""

from __future__ import annotations

import mmap
import os
import resource
import signal
from dataclasses import dataclass

# The kernel's mmap flags (uapi); the page size goes as log2 in bits 26-31 of the flags
# (include/uapi/asm-generic/hugetlb_encode.h).
from .probe import MAP_HUGE_SHIFT, MAP_HUGETLB

REFUSED = 3  # the child's exit code when mmap() refused the reservation


@dataclass(frozen=True)
class MeasuredLimit:
    page_kb: int
    asked: int  # pages the probe set out to touch
    touched: int  # pages it faulted before the end
    sigbus: bool  # stopped by SIGBUS: a fault limit at `touched` pages (of what is left)
    refused: bool = False  # mmap() refused the reservation (a reservation limit, the pool)
    why_fewer: str = ""  # why it asked for fewer pages than the instance needs

    def said(self) -> str:
        size = f"{self.page_kb // 1024} MiB" if self.page_kb < 1 << 20 else \
            f"{self.page_kb >> 20} GiB"
        if self.refused:
            return (f"a probe's reservation of {self.asked} x {size} pages was refused "
                    "(a reservation limit, or the pool)")
        head = f"a probe in hpadvise's cgroup faulted {self.touched} of {self.asked} x {size} pages"
        return head + (", then SIGBUS" if self.sigbus else " without SIGBUS") + \
            (f" ({self.why_fewer})" if self.why_fewer else "")


def measure(page_kb: int, pages: int, free_unreserved: int) -> MeasuredLimit:
    """Touch up to `pages` huge pages of this size in a child process; at most the pool's
    free unreserved pages."""
    n = min(pages, max(0, free_unreserved))
    fewer = "" if n >= pages else f"the pool has {max(0, free_unreserved)} free unreserved"
    if n <= 0:
        return MeasuredLimit(page_kb, 0, 0, False, False, fewer)
    page = page_kb * 1024
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 4
        try:
            os.close(r)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file from the SIGBUS
            signal.signal(signal.SIGBUS, signal.SIG_DFL)
            try:
                m = mmap.mmap(-1, n * page, flags=mmap.MAP_PRIVATE | MAP_HUGETLB
                              | (page.bit_length() - 1) << MAP_HUGE_SHIFT)
            except OSError:
                os._exit(REFUSED)
            for i in range(n):
                m[i * page] = 1  # the fault: charged to the cgroup, or SIGBUS past its limit
                os.write(w, b"+")
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    touched = 0
    while chunk := os.read(r, 4096):
        touched += len(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    bus = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGBUS
    refused = os.WIFEXITED(status) and os.WEXITSTATUS(status) == REFUSED
    return MeasuredLimit(page_kb, n, touched, bus, refused, fewer)
