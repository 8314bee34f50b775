"""The recommendation engine: host facts + instances + profile -> findings and a plan.

Every decision is made here once and carried as data: each instance's `Placement` (page size,
pooled or not, and why), each pool's `PoolPlan` with its feasibility, each knob's `Change`
(kind, page size or THP knob, instance; now, at the next boot, planned). `check` renders it,
`apply` executes it, `size`, `k8s` and `validate` read it; none of them decides again.
"""

from __future__ import annotations

import dataclasses

from ..nextboot import boot_plan
from . import host_findings, sysctl_plan
from .feasible import commit_limit, demote, feasibility
from ..api.engines import Engine
from ..kit.findings import CORE
from ..facts.host import HostFacts
from ..facts.hugetlb_kernel import hvo, vmemmap_saved_kb
from ..api.model import SCHEMA_VERSION, Change, Instance, Placement, Recorded, Report  # noqa: F401
from ..api.profiles import Profile
from ..kit.knob_id import KnobId
from ..ledger.recorded import why as recorded_why
from ..kit.sizing import GIB_KB, PoolPlan, fmt_bytes, fmt_page, headrooms, pool_label, spread

def choose_page_kb(inst: Instance, host: HostFacts, profile: Profile) -> int | None:
    """The page size an instance should use. An explicit size the kernel offers is kept (on
    arm64, PostgreSQL's huge_page_size = 32MB, say); otherwise the kernel's default size
    (2 MiB on x86-64 and arm64 with 4 KiB pages, 32 MiB with 16 KiB, 512 MiB with 64 KiB), or
    1 GiB pages where the kernel offers them, the engine can select the size, and the demand
    is large enough that rounding up to whole GiB wastes little (profile: gigantic_*): the TLB
    reach grows 512-fold over 2 MiB, while a gigantic pool must be had at boot or from
    contiguous ranges. Intermediate sizes (arm64's 64 KiB and 32 MiB, contiguous entries) are
    never chosen for the user: their TLB gain depends on the core's TLB design."""
    d = inst.demand
    if d is None:
        return None
    default = host.default_hugepage_kb
    if d.page_kb in host.page_sizes_kb and d.page_kb != default:
        return d.page_kb  # the user chose a non-default size on purpose
    base = d.page_kb if d.page_kb in host.page_sizes_kb else default
    if base is None or base not in d.pages:
        return None
    if profile.gigantic == "never" or not d.selectable or not host.supports_1g \
            or GIB_KB not in d.pages or base == GIB_KB:
        return base
    need = d.pages[base] * base
    waste_pct = (d.pages[GIB_KB] * GIB_KB - need) * 100 / need
    big = need * 1024 >= profile.gigantic_min_bytes
    if (big or profile.gigantic == "prefer") and waste_pct <= profile.gigantic_max_waste_pct:
        return GIB_KB
    return base


def build(host: HostFacts, instances: list[Instance], profile: Profile,
          engines: dict[str, Engine], recorded: dict[str, Recorded] | None = None) -> Report:
    """The plan; `recorded`: what the active applies recorded for stopped instances, by ID
    (recorded.for_stopped), kept for them at least."""
    r = Report(host, profile, instances, engines=engines, recorded=dict(recorded or {}))
    for inst in instances:
        r.errors.extend(inst.errors)
        r.findings.extend(inst.findings)
        if inst.errors:  # one instance's trouble is its finding; the report stands
            r.findings.append(CORE["instance.error"](
                "hpadvise could not read or size it completely; the other instances and the "
                "host are unaffected. Fix what the evidence says and check again.",
                "; ".join(inst.errors), inst.id, title=f"{inst.id}: " + (
                    "its huge page demand is unknown" if inst.demand is None else
                    "it could not be read completely"),
                severity="crit" if inst.demand is None else "warn"))
    for inst in instances:
        eng = engines.get(inst.engine)
        p = r.placements[inst.id] = _as_recorded(r, inst, _place(r, inst, eng))
        if p.status in ("kept", "stopped"):  # found, not named: nothing of it is planned
            if p.status == "kept":
                r.findings.append(CORE["pool.kept"](
                    "It was not named and is not running, but it takes these pages when it "
                    "starts (its configuration asks for huge pages and would not start "
                    "without them, or fall back silently): lowering the pool would break it.",
                    p.reason, inst.id, title=f"The pool keeps {p.pages} pages for stopped "
                                             f"{inst.id}"))
            continue
        if eng is None:
            continue
        r.findings.extend(eng.findings(inst, host, profile))
        if p.status == "held_back":  # its cgroup cannot hold the pages: no huge pages for it
            r.changes.extend(eng.changes(inst, None, host, profile))
        elif p.status in ("pool", "thp"):
            r.changes.extend(eng.changes(inst, p.page_kb or host.default_hugepage_kb or 2048,
                                         host, profile))
    _pools(r)
    host_findings.thp(r, engines)
    host_findings.host(r)
    sysctl_plan.plan(r)
    boot_plan.findings(r)
    return r


def keeps_pages(inst: Instance, eng: Engine | None) -> bool:
    """A stopped instance found but not named (not changed) whose next start takes huge
    pages: the pools keep them for it (Placement "kept")."""
    d = inst.demand
    if not inst.found or inst.running or d is None or eng is None or d.page_kb not in d.pages:
        return False
    # one only a journal knows (recorded.absent): what that apply planned is what it takes
    return inst.state is None or eng.needs_pages_at_start(inst)


def unsized(inst: Instance, host: HostFacts, profile: Profile, eng: Engine | None) -> str | None:
    """Why the plan cannot size a running or named instance's pool (Placement "unsized"), or
    None: from the instance, the host and the profile alone, so that apply can leave such an
    instance out before it plans."""
    if (inst.found and not inst.running) or (eng is not None and not eng.uses_pool(
            inst, profile)) or choose_page_kb(inst, host, profile) is not None:
        return None
    return ("its demand is unknown (its configuration could not be read)"
            if inst.demand is None else "no page size it can use exists on this host")


def _place(r: Report, inst: Instance, eng: Engine | None) -> Placement:
    """Where the instance's memory goes: the one place this is decided."""
    if inst.found and not inst.running:  # stopped, found but not named: kept, not changed
        d = inst.demand
        if not keeps_pages(inst, eng):
            return Placement(inst.id, "stopped", None, 0, f"stopped (found: {inst.found}); it "
                             "takes no huge pages when it starts, so none are kept for it")
        return Placement(inst.id, "kept", d.page_kb, d.pages[d.page_kb],
                         f"stopped (found: {inst.found}): the pool keeps its "
                         f"{d.pages[d.page_kb]} x {fmt_page(d.page_kb)} pages for its next "
                         "start; nothing of it is changed", by_size=d.split)
    if eng is not None and not eng.uses_pool(inst, r.profile):
        return Placement(inst.id, "thp", None, 0, "its engine serves it from THP, not a pool")
    why = unsized(inst, r.host, r.profile, eng)
    if why:
        return Placement(inst.id, "unsized", None, 0, why)
    kb = choose_page_kb(inst, r.host, r.profile)
    d = inst.demand
    why_not = eng.held_back(inst, r.profile) if eng is not None else None
    if why_not:
        return Placement(inst.id, "held_back", kb, 0, why_not)
    by = dict(d.split) if d.split and kb == d.page_kb else None
    for size, n in (by or {kb: d.pages[kb]}).items():
        held_back = host_findings.cgroup(r, inst, size, n)
        if held_back:
            return Placement(inst.id, "held_back", kb, 0, held_back)
    chosen = "as configured" if kb == d.page_kb else "chosen by the profile"
    if by:
        return Placement(inst.id, "pool", kb, by.get(kb, 0), ", ".join(
            f"{n} x {fmt_page(k)}" for k, n in sorted(by.items(), reverse=True)) +
            f": each region on the page size it takes, {chosen}", by_size=by)
    return Placement(inst.id, "pool", kb, d.pages[kb], f"{fmt_page(kb)} pages, {chosen}")


def _as_recorded(r: Report, inst: Instance, p: Placement) -> Placement:
    """A stopped instance keeps at least the pages the active apply that planned it recorded
    (recorded.py): what its configuration says now may not be all its next start takes (a
    command line of its own, files edited since). Its pages at one size only."""
    rec = r.recorded.get(inst.id)
    if rec is None or inst.running or p.status not in ("pool", "kept") or p.by_size \
            or rec.pages.get(p.page_kb, 0) <= p.pages:
        return p
    p = dataclasses.replace(p, pages=rec.pages[p.page_kb], recorded_by=rec.apply,
                            configured_pages=p.pages)
    why = recorded_why(inst.id, p.recorded_by, p.pages, p.configured_pages)
    if p.status == "kept":
        return dataclasses.replace(p, reason=f"stopped (found: {inst.found}): the pool keeps "
                                   f"{p.pages} x {fmt_page(p.page_kb)} pages for its next "
                                   f"start ({why}); nothing of it is changed")
    return dataclasses.replace(p, reason=f"{p.reason}; {why}")


def _pools(r: Report) -> None:
    host, profile = r.host, r.profile
    by_size: dict[int, list[Instance]] = {}
    for inst in r.instances:
        for kb in r.placements[inst.id].sizes():
            by_size.setdefault(kb, []).append(inst)
    demands = {kb: sum(r.placements[i.id].sizes()[kb] for i in insts)
               for kb, insts in by_size.items()}
    rooms = headrooms(demands, profile.headroom_pct, profile.headroom_min_pages,
                      host.is_gigantic)
    for size_kb, insts in sorted(by_size.items()):
        pool = host.pool(size_kb)
        demand = demands[size_kb]
        held = sum(_held(i, size_kb) for i in insts)
        claimed = pool.claimed_pages if pool else 0
        pp = PoolPlan(size_kb, pool.persistent_pages if pool else None, demand,
                      rooms[size_kb],
                      max(0, claimed - held), tuple(i.id for i in insts))
        pp = _per_node(r, pp, insts, pool)
        r.pools.append(pp)
        if pp.current_pages != pp.target_pages:
            kept = [i.id for i in insts if r.placements[i.id].status == "kept"]
            parts = [f"{demand} for {', '.join(pp.instances)}"
                     + (f" (stopped, kept for their next start: {', '.join(kept)})"
                        if kept else "")]
            if pp.headroom_pages:
                parts.append(f"{pp.headroom_pages} headroom ({profile.headroom_pct:g}%)")
            elif profile.headroom_pct and host.is_gigantic(size_kb):
                parts.append(_no_headroom(demands, size_kb, profile.headroom_pct))
            if pp.foreign_pages:
                parts.append(f"{pp.foreign_pages} in use by other processes")
            whys = [recorded_why(i.id, pl.recorded_by, pl.pages, pl.configured_pages)
                    for i in insts if (pl := r.placements[i.id]).recorded_by]
            r.changes.insert(0, Change("pool", pool_label(size_kb), pp.current_pages,
                                       pp.target_pages, " + ".join(parts) + "".join(
                                           f"; {w}" for w in whys), size_kb=size_kb,
                                       id=KnobId.pool(size_kb)))
        r.pools[-1] = feasibility(r, pp)
    demote(r)
    # Safety rail: never plan pools that leave the OS less than the profile's floor.
    total_kb = host.mem.total_kb
    if total_kb:
        planned = {p.size_kb: p.target_pages for p in r.pools}
        pool_kb = sum(planned.get(p.size_kb, p.persistent_pages or 0) * p.size_kb
                      for p in host.pools)
        floor = profile.os_floor(total_kb * 1024)
        # HVO gives each page's struct pages but one back to the OS (hugetlb_kernel.py)
        saved_kb = sum(planned.get(p.size_kb, p.persistent_pages or 0)
                       * vmemmap_saved_kb(p.size_kb, host.base_page_bytes // 1024)
                       for p in host.pools) if hvo(host) else 0
        left = total_kb * 1024 - pool_kb * 1024 + saved_kb * 1024
        if saved_kb and r.pools:
            r.findings.append(CORE["pool.hvo"](
                "HugeTLB Vmemmap Optimization frees each huge page's struct pages but one "
                f"(7 of 8 pages for a 2 MiB page): {fmt_bytes(saved_kb * 1024)} of the "
                "planned pools' metadata goes back to the OS. Shrinking a pool has to allocate "
                "it again, which fails under memory pressure: a rollback or a smaller pool can "
                "then stop short until memory is freed.",
                "vm.hugetlb_optimize_vmemmap = 1", title=f"HVO gives "
                f"{fmt_bytes(saved_kb * 1024)} of the pools' struct pages back"))
        if r.pools and left < floor:
            msg = (f"the planned pools ({fmt_bytes(pool_kb * 1024)}) would leave "
                   f"{fmt_bytes(left)} to the OS, under the profile's floor of {fmt_bytes(floor)}"
                   if left >= 0 else
                   f"the planned pools ({fmt_bytes(pool_kb * 1024)}) are "
                   f"{fmt_bytes((pool_kb - total_kb) * 1024)} more than this host's memory "
                   f"({fmt_bytes(total_kb * 1024)}), before the profile's floor of "
                   f"{fmt_bytes(floor)} for the OS")
            r.blocked.append(msg)
            r.pools = [dataclasses.replace(p, feasibility="does_not_fit", feasibility_reason=msg)
                       for p in r.pools]
            r.findings.append(CORE["pool.os_floor"](
                "Huge pages in a pool are unavailable to anything else: page cache, backends' "
                "private memory and the kernel. Lower the database's memory settings or add RAM.",
                msg, source=f"profile {profile.name}: pool.os_floor / os_floor_pct"))
        commit_limit(r, pool_kb)


def _no_headroom(demands: dict[int, int], size_kb: int, pct: float) -> str:
    """Why a gigantic pool has no headroom (sizing.headrooms): its share is under one page."""
    smaller = max((kb for kb in demands if kb < size_kb), default=None)
    share = fmt_bytes(int(demands[size_kb] * size_kb * 1024 * pct / 100))
    return (f"no headroom ({pct:g}% is {share}, under one {fmt_page(size_kb)} page"
            + (f"; the {fmt_page(smaller)} pool takes it)" if smaller else ")"))


def _held(inst: Instance, size_kb: int) -> int:
    """Pages of size_kb the running instance holds now."""
    d = inst.demand
    if d.held_split is not None:
        return d.held_split.get(size_kb, 0)
    return d.held_pages if inst.backing == "hugetlb" and inst.backing_page_kb == size_kb else 0


def _per_node(r: Report, pp: PoolPlan, insts: list[Instance], pool) -> PoolPlan:
    """On a multi-node host with instances bound to one node (cpuset.mems, numactl --membind),
    plan each node's pool: their demand on their node, the unbound demand and the headroom
    spread as the kernel spreads a global pool, and pages others hold where they hold them.
    hugetlb pages come from the allocating task's allowed nodes only (hugetlbpage.rst), so a
    bound instance needs its pages on its own node."""
    nodes = r.host.numa_nodes
    if len(nodes) < 2 or not any(i.demand.node is not None for i in insts):
        return pp
    target = {n: 0 for n in nodes}
    unbound = pp.headroom_pages + pp.foreign_pages
    for i in insts:
        n, pages = i.demand.node, r.placements[i.id].sizes()[pp.size_kb]
        if n in target:
            target[n] += pages
        else:
            unbound += pages
    for n, k in spread(unbound, nodes).items():
        target[n] += k
    # never below what is in use on a node now (those pages would only turn surplus)
    for np_ in (pool.nodes if pool is not None else ()):
        if np_.node in target and np_.nr_pages is not None and np_.free_pages is not None:
            target[np_.node] = max(target[np_.node], np_.nr_pages - np_.free_pages)
    _node_short(r, pp, insts, pool)
    bound = [f"{i.id} on node {i.demand.node}" + (f" ({i.numa_binding})" if i.numa_binding
                                                   else "")
             for i in insts if i.demand.node is not None]
    r.findings.append(CORE["pool.per_node"](
        "Instances bound to a node take huge pages from that node only; a global count would "
        "spread the pages evenly and leave a bound instance short.",
        ", ".join(bound) + "; per node: " + ", ".join(f"node{n}={k}" for n, k in target.items()),
        title=f"{fmt_page(pp.size_kb)} pool planned per NUMA node"))
    return dataclasses.replace(pp, per_node=tuple(sorted(target.items())))


def _node_short(r: Report, pp: PoolPlan, insts: list[Instance], pool) -> None:
    """A bound instance's next start with the pools as they are now: its reservation counts the
    free pages of its own node only (mm/hugetlb.c, allowed_mems_nr()), so a node short of its
    demand fails the mapping (PostgreSQL huge_pages=on: no start; try: normal pages) even though
    the pool's total is enough (a pool short in all is the plan's pool change). Pages it holds
    now are freed by its own restart."""
    free = {np_.node: np_.free_pages for np_ in (pool.nodes if pool is not None else ())}
    for i in insts:
        n = i.demand.node
        if n is None or free.get(n) is None or i.demand.pages.get(pp.size_kb) is None:
            continue
        need, held = i.demand.pages[pp.size_kb], _held(i, pp.size_kb)
        total = (pool.free_pages or 0) + held
        if free[n] + held >= need or total < need:  # a pool short in all: said elsewhere
            continue
        r.findings.append(CORE["pool.node_short"](
            "An instance bound to one NUMA node reserves huge pages on that node only; the "
            "kernel spreads a global pool over every node, so a pool that is large enough in "
            "all can still leave the bound node short. Apply this plan (each node's pool) "
            "before the instance starts again.",
            f"{i.id} ({i.numa_binding or 'bound'}) needs {need} {fmt_page(pp.size_kb)} pages on "
            f"node {n}; node {n} has {free[n]} free" + (f" and {held} it holds" if held else "")
            + f", the pool {total} in all (enough, on the other nodes)",
            instance=i.id))


