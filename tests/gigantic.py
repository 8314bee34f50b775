"""Test helpers for 1 GiB pages: a host on which none can be had (memory blocks offline), and
room for them on a host whose memory earlier work fragmented."""

from __future__ import annotations

import glob
import os
import signal
from pathlib import Path

import hostlock
from support import KernelKnobs


MEMORY = "/sys/devices/system/memory"


class NoGiganticPages:
    """Makes a runtime 1 GiB page impossible to get, deterministically, whatever the host's
    memory looks like: one memory block (128 MiB here) of every 1 GiB-aligned range of RAM is
    taken offline (memory hotplug, Documentation/admin-guide/mm/memory-hotplug.rst), so no
    range can be a free, aligned 1 GiB block. Free memory is initialised first (_pull_in); a
    range where no block goes offline then holds unmovable pages, which keep a 1 GiB page out
    of it anyway. The blocks are put online again
    on exit, into the zone they came from (online_kernel). `why` says what was missing when
    it could not be done."""

    def __init__(self):
        self.offline: list[int] = []
        self.why: str | None = None

    @staticmethod
    def _state(n: int) -> str:
        return f"{MEMORY}/memory{n}/state"

    def __enter__(self) -> "NoGiganticPages":
        hostlock.hold_memory()  # it fills all free memory for a moment: nothing beside it
        try:
            block = int(Path(f"{MEMORY}/block_size_bytes").read_text(), 16)
        except OSError:
            self.why = f"no memory hotplug here ({MEMORY}) to keep 1 GiB pages out of reach"
            return self
        self._pull_in()
        per = max(1, (1 << 30) // block)
        ranges: dict[int, list[int]] = {}
        for d in glob.glob(f"{MEMORY}/memory[0-9]*"):
            n = int(d.rsplit("memory", 1)[1])
            ranges.setdefault(n // per, []).append(n)
        try:
            self._take(ranges, per)
        except BaseException:  # interrupted: what went offline goes back online
            self.__exit__()
            raise
        return self

    def _take(self, ranges: dict[int, list[int]], per: int) -> None:
        for blocks in ranges.values():
            if len(blocks) < per:  # a range with a hole cannot be a 1 GiB page
                continue
            for n in sorted(blocks, reverse=True):
                if Path(self._state(n)).read_text().strip() != "online":
                    break  # already offline: the range is out of reach
                if self._offline(n):
                    self.offline.append(n)
                    break

    @staticmethod
    def _pull_in() -> None:
        """Hand all free memory to the buddy allocator first: a kernel that initialises its
        memory lazily refuses to take a block not initialised yet offline, and the range then
        stays open to a 1 GiB page once something initialises it (measured on this VM freshly
        booted: 15 of 24 ranges refused every block; after a 2 MiB pool as big as free memory
        was made and released, 1). The 2 MiB pool is put back as it was."""
        p = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
        if not os.path.exists(p):
            return
        was = Path(p).read_text().strip()
        free_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").open()
                       if line.startswith("MemFree:"))
        try:
            KernelKnobs.set(p, int(was) + free_kb // 2048)
        finally:
            KernelKnobs.set(p, was)

    def _offline(self, n: int, seconds: int = 5) -> bool:
        """Take one block offline, giving up after `seconds`: offlining migrates the block's
        pages and retries for as long as one stays busy, until a signal stops it
        (mm/memory_hotplug.c, offline_pages). An unbuffered write, so that nothing retries it
        on close."""
        def stop(*_):
            raise TimeoutError
        old = signal.signal(signal.SIGALRM, stop)
        fd = os.open(self._state(n), os.O_WRONLY)
        try:
            signal.alarm(seconds)
            os.write(fd, b"offline")
            return True
        except (OSError, TimeoutError):  # unmovable or busy pages: try the next block
            return False
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
            os.close(fd)

    def __exit__(self, *exc) -> None:
        for n in reversed(self.offline):
            KernelKnobs.set(self._state(n), "online_kernel")


class GiganticRoom:
    """Room for runtime 1 GiB pages on a host whose memory earlier work fragmented. A 1 GiB
    page needs a whole free, aligned 1 GiB range (hugetlbpage.rst); what kept every range
    here from being one was mostly reclaimable kernel memory, dentries and inodes left all
    over RAM by the suite's servers (measured: SReclaimable 150 MB, no 1 GiB page to be had;
    after dropping it, 6.5 MB, and the page was granted; taking memory blocks offline and
    online again did not help, most refused with unmovable pages). So: write back, drop the
    page cache and the reclaimable slab (Documentation/admin-guide/sysctl/vm.rst,
    drop_caches: nothing dirty is lost, the caches refill), then compact."""

    @staticmethod
    def make() -> None:
        os.sync()
        KernelKnobs.set("/proc/sys/vm/drop_caches", 3)
        KernelKnobs.set("/proc/sys/vm/compact_memory", 1)
