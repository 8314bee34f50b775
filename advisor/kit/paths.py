"""Where the kernel shows huge page pools and THP: the only place these paths are spelled
(Documentation/admin-guide/mm/hugetlbpage.rst, Documentation/admin-guide/mm/transhuge.rst,
Documentation/ABI/testing/sysfs-kernel-mm-hugepages, sysfs-devices-system-node)."""

from __future__ import annotations

from .knob_id import KnobId, size_dir

THP_DIR = "/sys/kernel/mm/transparent_hugepage"
HUGEPAGES_DIR = "/sys/kernel/mm/hugepages"
NODES_DIR = "/sys/devices/system/node"


def pool_dir(size_kb: int, node: int | None = None) -> str:
    """A pool's sysfs directory: the global one, or one NUMA node's."""
    base = HUGEPAGES_DIR if node is None else f"{NODES_DIR}/node{node}/hugepages"
    return f"{base}/{size_dir(size_kb)}"


def sysfs_pool(size_kb: int, node: int | None = None) -> str:
    """The sysfs file of a pool's size: the global one, or one NUMA node's."""
    return f"{pool_dir(size_kb, node)}/nr_hugepages"


def thp_file(name: str) -> str:
    """A THP file: a top-level one ("defrag") or a per-size one ("hugepages-64kB/enabled")."""
    return f"{THP_DIR}/{name}"


def knob_path(k: KnobId) -> str:
    """The file a boot-time knob lives in: its pool's nr_hugepages, its THP file, or its
    setting under /proc/sys."""
    if k.is_pool:
        return sysfs_pool(k.page_kb)
    if k.is_sysctl:
        return "/proc/sys/" + str(k.file).replace(".", "/")
    return thp_file(k.thp_path)
