"""Which boot-time kernel knob: a static pool of one page size, a top-level THP file, a
per-size THP file, or a setting under /proc/sys (facts/sysctls.py declares those). One type,
one spelling and one parser for each:

- the key, as check's JSON (plan.boot[].knob) and its boot view write it: "pool.2048",
  "thp.defrag", "thp.hugepages-64kB/enabled", "sysctl.vm.zone_reclaim_mode". It is written
  only: code passes the KnobId itself, and nothing reads a key back;
- a sysfs choice file's value ("always [madvise] never");
- the kernel's directory of a page size, "hugepages-<kB>kB", under /sys/kernel/mm/hugepages
  (the pools, Documentation/admin-guide/mm/hugetlbpage.rst) and under
  /sys/kernel/mm/transparent_hugepage (the per-size THP knobs,
  Documentation/admin-guide/mm/transhuge.rst, "hugepages-<size>kB/enabled").

Nothing else builds or takes these strings apart."""

from __future__ import annotations

import re
from dataclasses import dataclass

# the top-level THP files a plan sets (transhuge.rst, "Global THP controls")
THP_FILES = ("enabled", "defrag", "shmem_enabled")
# the per-size files (transhuge.rst: hugepages-<size>kB/enabled, .../shmem_enabled)
SIZE_FILES = ("enabled", "shmem_enabled")

_SIZE_DIR = re.compile(r"hugepages-([1-9]\d*)kB")


@dataclass(frozen=True)
class Choice:
    """A sysfs choice file as the kernel shows it, "always [madvise] never": the word in
    brackets is the value (a file of one word is that word), `words` every choice."""
    chosen: str | None
    words: tuple[str, ...]
    bracketed: bool  # the kernel's choice format; False: a plain value


def read_choice(text: str) -> Choice:
    """The one parser of the choice format (transhuge.rst shows it for every THP file)."""
    words = text.split()
    chosen = next((w[1:-1] for w in words if w.startswith("[") and w.endswith("]")), None)
    if chosen is None and len(words) == 1:
        chosen = words[0]
    return Choice(chosen, tuple(w.strip("[]") for w in words), any("[" in w for w in words))


def size_dir(kb: int) -> str:
    """The kernel's directory name for a page size: hugepages-2048kB."""
    return f"hugepages-{int(kb)}kB"


def pool_of_path(path: str, hugepages_dir: str, nodes_dir: str) -> tuple[int | None, int] | None:
    """(node, page kB) of a pool's nr_hugepages file: the global one under `hugepages_dir`
    (node None) or a node's under `nodes_dir`/nodeN/hugepages; None for another path."""
    head, _, last = path.rpartition("/")
    base, _, size = head.rpartition("/")
    kb = size_of_dir(size)
    if last != "nr_hugepages" or kb is None:
        return None
    if base == hugepages_dir:
        return None, kb
    mt = re.fullmatch(re.escape(nodes_dir) + r"/node(\d+)/hugepages", base)
    return (int(mt.group(1)), kb) if mt else None


def size_of_dir(name: str) -> int | None:
    """The page size (kB) a hugepages-<kB>kB directory name stands for; None for another."""
    mt = _SIZE_DIR.fullmatch(name)
    return int(mt.group(1)) if mt else None


@dataclass(frozen=True)
class KnobId:
    """kind "pool" (page_kb: the pool's page size), "thp" (file: the THP file; page_kb:
    the size of a per-size knob, None for the top-level one) or "sysctl" (file: its name,
    "vm.zone_reclaim_mode")."""
    kind: str
    page_kb: int | None = None
    file: str | None = None

    @classmethod
    def pool(cls, kb: int) -> KnobId:
        return cls("pool", int(kb))

    @classmethod
    def thp(cls, file: str, kb: int | None = None) -> KnobId:
        return cls("thp", None if kb is None else int(kb), file)

    @classmethod
    def sysctl(cls, name: str) -> KnobId:
        return cls("sysctl", None, name)

    @classmethod
    def of_thp_path(cls, rest: str) -> KnobId | None:
        """The knob a path under transparent_hugepage/ sets ("defrag",
        "hugepages-64kB/enabled"); None for a file no plan sets."""
        size, _, file = rest.rpartition("/")
        if not size:
            return cls.thp(rest) if rest in THP_FILES else None
        kb = size_of_dir(size)
        return cls.thp(file, kb) if kb is not None and file in SIZE_FILES else None

    @property
    def is_pool(self) -> bool:
        return self.kind == "pool"

    @property
    def per_size(self) -> bool:
        """A per-size THP knob (hugepages-<kB>kB/<file>)."""
        return self.kind == "thp" and self.page_kb is not None

    @property
    def thp_path(self) -> str:
        """Its path under transparent_hugepage/."""
        if self.kind != "thp":
            raise ValueError(f"{self.key} is not a THP knob")
        return f"{size_dir(self.page_kb)}/{self.file}" if self.per_size else str(self.file)

    @property
    def is_sysctl(self) -> bool:
        return self.kind == "sysctl"

    @property
    def key(self) -> str:
        if self.is_sysctl:
            return f"sysctl.{self.file}"
        return f"pool.{self.page_kb}" if self.is_pool else f"thp.{self.thp_path}"

    def __str__(self) -> str:
        return self.key
