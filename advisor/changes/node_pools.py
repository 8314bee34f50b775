"""The order in which rollback puts per-node pools back.

Writing one node's nr_hugepages aims the whole pool at `value + the pages of the other nodes`,
and on the kernels that count the other nodes' surplus pages in that sum (mm/hugetlb.c,
set_max_huge_pages(): `count += h->nr_huge_pages - h->nr_huge_pages_node[nid]`; later kernels
subtract the surplus) the surplus pages of another node become the target of persistent pages
on the node written: the kernel allocates fresh pages there. Surplus pages appear when a pool
is lowered below the pages still in use, which rollback does while the server it restarts last
still holds them. Seen in a two-node guest on Debian 12's 6.1: node 1 written to 0 under a
running server bound to it, then node 0 written to 0, left 272 new persistent pages on node 0.

So a per-node restore that leaves pages in use as surplus comes after every other write of its
size; where more than one node would, and every node of that size goes back to 0, one global
write of 0 comes first instead (a global write frees what is free and turns what is in use into
surplus on every node at once, allocating nothing).
"""

from __future__ import annotations

from typing import Any

from .actions import Action, Pool
from ..facts.sysroot import SysRoot
from ..kit.paths import pool_dir


def _keeps(action: Pool, old: int) -> bool:
    """Whether writing `old` to the action's node leaves pages behind as surplus: pages in use
    there (nr - free), or, while the size has reservations (counted for the whole pool only,
    not per node), any page above `old` (the kernel keeps reserved pages: in the guest a
    server holding 18 pages of node 1 and reserving the rest left 272 surplus)."""
    sr = SysRoot(action.root or "/")
    base = action.path[len(action.root):].rsplit("/", 1)[0]
    nr = sr.read_int(f"{base}/nr_hugepages", quiet_missing=True) or 0
    if nr - (sr.read_int(f"{base}/free_hugepages", quiet_missing=True) or 0) > old:
        return True
    resv = sr.read_int(f"{pool_dir(action.size_kb)}/resv_hugepages", quiet_missing=True)
    return (resv or 0) > 0 and nr > old


def restore_order(items: list[tuple[Any, Action]]) -> tuple[list[tuple[Any, Action]],
                                                             list[Pool]]:
    """(the restores in a safe order, global pools to write to 0 before them). `items` are
    (journal entry, action) in rollback's order; entries carry the old value as `.old`."""
    per_node = [(e, a) for e, a in items if isinstance(a, Pool) and a.node is not None]
    if not per_node:
        return items, []
    surplus = {id(a) for e, a in per_node if isinstance(e.old, int) and _keeps(a, e.old)}
    first: list[Pool] = []
    for size in {a.size_kb for _, a in per_node}:
        mine = [(e, a) for e, a in per_node if a.size_kb == size]
        if sum(id(a) in surplus for _, a in mine) > 1 and all(e.old == 0 for e, _ in mine):
            first.append(Pool(size, root=mine[0][1].root))
    late = [(e, a) for e, a in items if id(a) in surplus]
    return [(e, a) for e, a in items if id(a) not in surplus] + late, first
