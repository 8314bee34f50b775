"""Where the kernel shows huge page pools and THP: the only place these paths are spelled
(Documentation/admin-guide/mm/hugetlbpage.rst, Documentation/admin-guide/mm/transhuge.rst,
Documentation/ABI/testing/sysfs-kernel-mm-hugepages, sysfs-devices-system-node)."""

from __future__ import annotations

from .knob_id import size_dir

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
