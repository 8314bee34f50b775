"""The recommendation engine: host facts + instances + profile -> findings and a plan.

The plan is data (PoolPlan, Change): `check` renders it, `apply` will execute it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .cgroups import verdict as cgroup_verdict
from .engines import Change, Engine, Instance
from .findings import CORE, SEVERITIES, Finding
from .host import HostFacts
from .profiles import Profile
from .sizing import PoolPlan, commit_limit_kb, fmt_bytes, fmt_page, headroom, spread

SCHEMA_VERSION = 1
GIB_KB = 1048576


@dataclass
class Report:
    host: HostFacts
    profile: Profile
    instances: list[Instance]
    findings: list[Finding] = field(default_factory=list)
    pools: list[PoolPlan] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # reasons apply must refuse the plan
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    engines: dict[str, Engine] = field(default_factory=dict, repr=False)

    def worst(self) -> str:
        return max((f.severity for f in self.findings), key=SEVERITIES.index, default="ok")


def choose_page_kb(inst: Instance, host: HostFacts, profile: Profile) -> int | None:
    """The page size an instance should use. An explicit, supported size is kept; otherwise
    1 GiB pages when the CPU has pdpe1gb, the engine can select the size, and the demand is
    large enough that rounding up to whole GiB wastes little (profile: gigantic_*)."""
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
          engines: dict[str, Engine]) -> Report:
    r = Report(host, profile, instances, engines=engines)
    for inst in instances:
        r.errors.extend(inst.errors)
        r.findings.extend(inst.findings)

    chosen: dict[str, int] = {}
    for inst in instances:
        eng = engines.get(inst.engine)
        uses = eng is None or eng.uses_pool(inst, profile)
        kb = choose_page_kb(inst, host, profile) if uses else None
        held_back = kb is not None and _cgroup(r, inst, kb)
        if kb is not None and not held_back:
            chosen[inst.id] = kb
        if eng is None:
            continue
        r.findings.extend(eng.findings(inst, host, profile))
        if held_back:  # its cgroup cannot hold the pages: no huge pages for it
            r.changes.extend(eng.changes(inst, None, host, profile))
        elif kb is not None or not uses:
            r.changes.extend(eng.changes(inst, kb or host.default_hugepage_kb or 2048, host,
                                         profile))

    _pools(r, chosen)
    _thp(r, engines)
    _host_findings(r)
    _boot(r)
    return r


def plan_knobs(r: Report) -> dict[str, str]:
    """The value the plan wants for each boot-time knob ("pool.<kB>", "thp.<knob>"), as apply
    persists it. Pools planned per NUMA node are left out (they persist per node)."""
    out = {f"pool.{pp.size_kb}": str(pp.target_pages) for pp in r.pools if not pp.per_node}
    thp = {c.target.split("/")[1]: c.recommended for c in r.changes if c.kind == "thp"}
    p = r.profile
    for knob, want in (("enabled", p.thp_enabled), ("defrag", p.thp_defrag),
                       ("shmem_enabled", p.thp_shmem_enabled)):
        value = thp.get(knob) or getattr(r.host.thp, knob).value
        if want != "keep" and value:
            out[f"thp.{knob}"] = str(value)
    return out


def knob_now(host: HostFacts, knob: str) -> str | None:
    """A boot-time knob's value now (a pool: its persistent pages, without surplus)."""
    if knob.startswith("pool."):
        pool = next((p for p in host.pools if f"pool.{p.size_kb}" == knob), None)
        return None if pool is None or pool.persistent_pages is None else \
            str(pool.persistent_pages)
    return getattr(host.thp, knob.split(".", 1)[1]).value


def _boot(r: Report) -> None:
    """The next boot against now and the plan (boot.py reads who sets what at boot)."""
    from .boot import after_apply, persistence
    b, host = r.host.boot, r.host
    if b is None:
        return
    plan = plan_knobs(r)
    per = persistence(b, plan, host.default_hugepage_kb)
    after = after_apply(b, per)
    blocked = {k: (s, why) for k, s, why in per.blocked}
    for knob, value in plan.items():
        s = after.at_boot(knob)
        if s is not None and s.value == value:
            continue
        if s is None or s.stage < 0:  # THP without systemd, GRUB or TuneD to persist it
            known = s is not None
            r.findings.append(CORE["boot.not_persisted"](
                "Nothing here sets it at boot and apply cannot either (no systemd unit, no GRUB "
                "kernel parameter, no TuneD): the kernel starts with "
                + (f"{s.value} ({s.source})" if known else "its built-in default, which is "
                   "unknown here (no kernel config readable)") + ". Add it to a boot script "
                "such as /etc/rc.local (apply prints the line).",
                f"{knob}: planned {value}; {b.sysctl_engine}, kernel command line from "
                f"{b.cmdline_source}", title=f"{_knob_name(knob)} = {value} would not survive "
                "a reboot" if known else f"{_knob_name(knob)} = {value}: unknown after a reboot",
                severity="warn" if known else "info"))
            continue
        what, why = blocked.get(knob, (s, "it applies after hpadvise's setting"))
        r.findings.append(CORE["boot.overridden"](
            f"{what.source} sets {_knob_name(knob)} = {what.value} at boot and {why}: the next "
            f"boot undoes the plan ({value}). Remove that setting, or make it {value}; apply "
            "refuses to persist what it cannot make stick.",
            f"at next boot: {s.value} from {s.source}; plan: {value}",
            title=f"The next boot would set {_knob_name(knob)} to {s.value}, not the planned "
                  f"{value}"))
        r.blocked.append(f"{what.source} overrides {_knob_name(knob)} at boot; remove it first")
    for pool in host.pools:  # as things stand: can the instances on huge pages start again?
        knob = f"pool.{pool.size_kb}"
        s = b.at_boot(knob)
        at_boot = int(s.value) if s is not None and s.value.isdigit() else 0
        users = [i for i in r.instances if i.running and i.backing == "hugetlb" and i.demand
                 and (i.backing_page_kb or i.demand.page_kb) == pool.size_kb]
        need = sum(i.demand.held_pages or i.demand.pages.get(pool.size_kb, 0) for i in users)
        now = knob_now(host, knob)
        if users and at_boot < need:
            r.findings.append(CORE["boot.instance_breaks"](
                "After a reboot the pool is smaller than what the instances running on it hold "
                "now: a server that falls back runs on 4 KiB pages, one that insists (huge_pages "
                "= on, -XX:+UseLargePages with a hard failure) does not start. `hpadvise apply` "
                "persists the pool.", f"{knob}: now {now}, at next boot {at_boot} "
                f"({s.source if s else 'nothing sets it'}); held by "
                f"{', '.join(i.id for i in users)}: {need}",
                title=f"After a reboot the {_knob_name(knob)} would be {at_boot} pages; "
                      f"{len(users)} instance(s) need {need}"))
        elif now is not None and str(at_boot) != now and knob not in plan:
            r.findings.append(CORE["boot.differs"](
                "A value set by hand now is not what boot sets.", f"now {now}; at next boot "
                f"{at_boot} from {s.source if s else 'nothing (the kernel starts with none)'}",
                title=f"{_knob_name(knob)} is {now} now and {at_boot} after a reboot"))
    for knob in ("thp.enabled", "thp.defrag", "thp.shmem_enabled"):
        s, now = b.at_boot(knob), knob_now(host, knob)
        if s is not None and now is not None and s.value != now and knob not in plan:
            r.findings.append(CORE["boot.differs"](
                "A value set by hand now is not what boot sets.", f"now {now}; at next boot "
                f"{s.value} from {s.source}", title=f"{_knob_name(knob)} is {now} now and "
                f"{s.value} after a reboot"))


def boot_view(r: Report) -> list[dict]:
    """Each boot-time knob three ways: now, at the next boot (and what sets it), the plan."""
    b = r.host.boot
    if b is None:
        return []
    plan = plan_knobs(r)
    knobs = [f"pool.{p.size_kb}" for p in r.host.pools] + \
        ["thp.enabled", "thp.defrag", "thp.shmem_enabled"]
    out = []
    for knob in knobs:
        s = b.at_boot(knob)
        at = s.value if s else ("0" if knob.startswith("pool.") else None)
        src = s.source if s else ("nothing sets it" if knob.startswith("pool.") else
                                  "the kernel's built-in default (unknown here)")
        out.append({"knob": knob, "name": _knob_name(knob), "now": knob_now(r.host, knob),
                    "at_boot": at, "source": src, "plan": plan.get(knob)})
    return out


def _knob_name(knob: str) -> str:
    if knob.startswith("pool."):
        return f"{fmt_page(int(knob.split('.')[1]))} pool"
    return f"THP {knob.split('.', 1)[1]}"


def _pools(r: Report, chosen: dict[str, int]) -> None:
    host, profile = r.host, r.profile
    by_size: dict[int, list[Instance]] = {}
    for inst in r.instances:
        if inst.id in chosen:
            by_size.setdefault(chosen[inst.id], []).append(inst)
    for size_kb, insts in sorted(by_size.items()):
        pool = host.pool(size_kb)
        demand = sum(i.demand.pages[size_kb] for i in insts)
        held = sum(i.demand.held_pages for i in insts
                   if i.backing == "hugetlb" and i.backing_page_kb == size_kb)
        claimed = pool.claimed_pages if pool else 0
        pp = PoolPlan(size_kb, pool.persistent_pages if pool else None, demand,
                      headroom(demand, profile.headroom_pct, profile.headroom_min_pages),
                      max(0, claimed - held), tuple(i.id for i in insts))
        pp = _per_node(r, pp, insts, pool)
        r.pools.append(pp)
        if pp.current_pages != pp.target_pages:
            parts = [f"{demand} for {', '.join(pp.instances)}"]
            if pp.headroom_pages:
                parts.append(f"{pp.headroom_pages} headroom ({profile.headroom_pct:g}%)")
            if pp.foreign_pages:
                parts.append(f"{pp.foreign_pages} in use by other processes")
            r.changes.insert(0, Change("pool", f"hugepages-{size_kb}kB/nr_hugepages",
                                       pp.current_pages, pp.target_pages, " + ".join(parts)))
        _runtime_feasibility(r, pp)
    # Safety rail: never plan pools that leave the OS less than the profile's floor.
    total_kb = host.mem.total_kb
    if total_kb:
        planned = {p.size_kb: p.target_pages for p in r.pools}
        pool_kb = sum(planned.get(p.size_kb, p.persistent_pages or 0) * p.size_kb
                      for p in host.pools)
        floor = profile.os_floor(total_kb * 1024)
        left = total_kb * 1024 - pool_kb * 1024
        if r.pools and left < floor:
            msg = (f"the planned pools ({fmt_bytes(pool_kb * 1024)}) would leave "
                   f"{fmt_bytes(left)} to the OS, under the profile's floor of {fmt_bytes(floor)}")
            r.blocked.append(msg)
            r.findings.append(CORE["pool.os_floor"](
                "Huge pages in a pool are unavailable to anything else: page cache, backends' "
                "private memory and the kernel. Lower the database's memory settings or add RAM.",
                msg, source=f"profile {profile.name}: pool.os_floor / os_floor_pct"))
        _commit_limit(r, pool_kb)


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
        n = i.demand.node
        if n in target:
            target[n] += i.demand.pages[pp.size_kb]
        else:
            unbound += i.demand.pages[pp.size_kb]
    for n, k in spread(unbound, nodes).items():
        target[n] += k
    # never below what is in use on a node now (those pages would only turn surplus)
    for np_ in (pool.nodes if pool is not None else ()):
        if np_.node in target and np_.nr_pages is not None and np_.free_pages is not None:
            target[np_.node] = max(target[np_.node], np_.nr_pages - np_.free_pages)
    bound = [f"{i.id} on node {i.demand.node}" for i in insts if i.demand.node is not None]
    r.findings.append(CORE["pool.per_node"](
        "Instances bound to a node take huge pages from that node only; a global count would "
        "spread the pages evenly and leave a bound instance short.",
        ", ".join(bound) + "; per node: " + ", ".join(f"node{n}={k}" for n, k in target.items()),
        title=f"{fmt_page(pp.size_kb)} pool planned per NUMA node"))
    return dataclasses.replace(pp, per_node=tuple(sorted(target.items())))


def _cgroup(r: Report, inst: Instance, page_kb: int) -> bool:
    """Findings for an instance whose hugetlb cgroup cannot hold its pages (cgroups.py explains
    the two limits). True when the plan must not put it on huge pages."""
    v = cgroup_verdict(inst.cgroup, page_kb, inst.demand.pages[page_kb])
    if v is None:
        return False
    lim, need, iid = v.limit, v.need_bytes, inst.id
    pages = f"{inst.demand.pages[page_kb]} x {fmt_page(page_kb)}"
    if lim.max_events:
        r.findings.append(CORE["cgroup.hugetlb.hit"](
            "A process in this cgroup touched a huge page beyond the fault limit and was "
            "killed with SIGBUS (PostgreSQL logs \"terminated by signal 7: Bus error\" and "
            "restarts; a JVM dies).", f"{lim.mount}{lim.cgroup.rstrip('/')}/hugetlb.{lim.size}."
            f"{'events: max' if lim.version == 2 else 'failcnt:'} {lim.max_events}", iid,
            title=f"{iid}: its cgroup's {lim.size} huge page limit was hit {lim.max_events} "
                  "times"))
    if v.kind == "fits":
        return False
    cap = lim.rsvd_limit_bytes if v.kind == "reserve_short" else lim.limit_bytes
    fix = (f"Raise {lim.file('max')} and {lim.file('rsvd.max')} to at least {need} bytes, "
           f"or turn huge pages off for this instance (the plan does).")
    evidence = (f"needs {need} bytes ({pages}); {lim.file('max')} = "
                f"{lim.limit_bytes if lim.limit_bytes is not None else 'max'}, "
                f"{lim.file('rsvd.max')} = "
                f"{lim.rsvd_limit_bytes if lim.rsvd_limit_bytes is not None else 'max'}")
    if v.kind == "sigbus":
        r.findings.append(CORE["cgroup.hugetlb.sigbus"](
            "Reservations are not limited, so the mapping succeeds and the server starts (it "
            "even reports huge pages as free: /proc/meminfo is not per cgroup); the first touch "
            "past the fault limit kills it with SIGBUS. " + fix + " Or set the reservation "
            f"limit to {lim.limit_bytes} bytes, so that it fails cleanly at start instead.",
            evidence, iid, title=f"{iid} will crash with SIGBUS: cgroup {lim.limit_cgroup} allows "
            f"{fmt_bytes(cap)} of {lim.size} huge pages, it needs {fmt_bytes(need)}"))
    else:
        r.findings.append(CORE["cgroup.hugetlb.reserve_short"](
            "Mapping its huge pages fails at start: a server set to fall back runs on normal "
            "pages, one set to insist (PostgreSQL huge_pages = on) refuses to start. " + fix,
            evidence, iid, title=f"{iid} cannot reserve its huge pages: cgroup "
            f"{lim.rsvd_limit_cgroup} allows {fmt_bytes(cap)} of {lim.size}, it needs "
            f"{fmt_bytes(need)}"))
    mem = inst.memory_limit
    if mem is not None and mem.limit_bytes < need:
        r.findings.append(CORE["cgroup.memory.short"](
            "With huge pages off its buffers live on normal pages, and those are charged to the "
            "memory limit (huge pages are not): the kernel reclaims, swaps or OOM-kills inside "
            f"the cgroup. Raise {mem.file} by at least {need} bytes along with turning huge "
            "pages off, or raise the hugetlb limits instead.",
            f"{mem.file} = {mem.limit_bytes}; buffers {need} bytes", iid,
            title=f"{iid}: off huge pages, its {fmt_bytes(need)} of buffers exceed its cgroup's "
                  f"memory limit of {fmt_bytes(mem.limit_bytes)}"))
    return True


def _runtime_feasibility(r: Report, pp: PoolPlan) -> None:
    grow = pp.target_pages - (pp.current_pages or 0)
    if grow <= 0:
        return
    host = r.host
    if pp.size_kb >= GIB_KB:
        r.findings.append(CORE["pool.gigantic_runtime"](
            "1 GiB pages need physically contiguous, aligned 1 GiB ranges; a runtime "
            "allocation can fall short on a host that has been up for a while. Reserving them "
            f"at boot (hugepagesz=1G hugepages={pp.target_pages}) always works.",
            f"target {pp.target_pages}, now {pp.current_pages}",
            title=f"{grow} more 1 GiB pages needed at runtime"))
        return
    can = host.runtime_allocatable_pages(pp.size_kb)
    if can is not None and can < grow:
        r.findings.append(CORE["pool.fragmented"](
            "The kernel must compact memory to grow the pool and may still fall short; apply "
            "compacts first. A boot-time reservation (hugepages= on the kernel command line) "
            "avoids the problem.", f"buddyinfo: {can} blocks of order >= "
                                   f"{host.order_for(pp.size_kb)}",
            title=f"Free memory holds only {can} free {fmt_page(pp.size_kb)} blocks; {grow} "
                  "are needed"))


def _commit_limit(r: Report, pool_kb: int) -> None:
    """Reserved huge pages leave CommitLimit: under overcommit_memory=2 a large pool can make
    ordinary allocations fail (Documentation/mm/overcommit-accounting.rst)."""
    host, m = r.host, r.host.mem
    if host.sysctls.get("vm.overcommit_memory") != 2 or m.total_kb is None:
        return
    new_limit = commit_limit_kb(m.total_kb, pool_kb, host.sysctls.get("vm.overcommit_ratio") or 50,
                                m.swap_total_kb or 0, host.sysctls.get("vm.overcommit_kbytes") or 0)
    committed = m.committed_as_kb or 0
    margin = new_limit * r.profile.commit_min_free_pct / 100
    if committed > new_limit - margin:
        r.findings.append(CORE["commit.limit"](
            "Under vm.overcommit_memory=2, memory reserved for huge pages is taken out of "
            "CommitLimit; Committed_AS is already close to that, so allocations would fail. "
            "Raise vm.overcommit_ratio to make up for the pool.",
            f"Committed_AS {fmt_bytes(committed * 1024)}, CommitLimit now "
            f"{fmt_bytes((m.commit_limit_kb or 0) * 1024)}",
            title=f"With the planned pools CommitLimit falls to {fmt_bytes(new_limit * 1024)}"))


_THP_WHY = {
    "enabled": "governs private anonymous memory; with madvise only processes that ask for THP "
               "get it (transhuge.rst), and Redis logs a latency warning at start when it is "
               "always",
    "defrag": "with madvise only processes that asked for THP stall in direct compaction",
    "shmem_enabled": "governs shared anonymous memory, i.e. PostgreSQL's shared buffers when "
                     "they are not on static huge pages",
}


# When the profile's THP value does not suit an instance, the value chosen among those every
# instance accepts, in this order of preference (madvise serves a JVM's or MongoDB's madvise()
# while leaving everything else on small pages; transhuge.rst).
_THP_PREFER = {"enabled": ("madvise", "never", "always"),
               "defrag": ("madvise", "defer+madvise", "defer", "never", "always"),
               "shmem_enabled": ("never", "advise", "within_size", "always", "deny", "force")}


def _thp(r: Report, engines: dict[str, Engine] | None = None) -> None:
    """THP per the profile, adjusted so that every instance found can live with it: one plan
    for the host. A value no instance objects to is kept; otherwise the preferred value all
    accept, with a finding that says who needed what; no common value: a warning."""
    t, p = r.host.thp, r.profile
    needs: dict[str, list[tuple[set[str], str]]] = {}
    for inst in r.instances:
        eng = (engines or {}).get(inst.engine)
        if eng is not None:
            for knob, need in eng.thp_needs(inst, p).items():
                needs.setdefault(knob, []).append(need)
    for knob, want in (("enabled", p.thp_enabled), ("defrag", p.thp_defrag),
                       ("shmem_enabled", p.thp_shmem_enabled)):
        cur = getattr(t, knob).value
        if cur is None:
            continue
        if knob in needs:
            ok = set.intersection(*(set(a) for a, _ in needs[knob]))
            why = "; ".join(w for _, w in needs[knob])
            base = cur if want == "keep" else want
            if not ok:
                r.findings.append(CORE["thp.conflict"](
                    "No single value suits every instance on this host; keeping the profile's. "
                    "Consider separate hosts, or static huge pages for one of them.", why,
                    title=f"Instances need different THP {knob} values"))
            elif base not in ok:
                pick = next(v for v in _THP_PREFER[knob] + tuple(sorted(ok)) if v in ok)
                r.findings.append(CORE["thp.resolved"](
                    f"{pick} is what every instance here can live with.", why,
                    title=f"THP {knob}: {pick} instead of {base}"))
                want = pick
        if want == "keep" or cur == want:
            continue
        r.changes.append(Change("thp", f"transparent_hugepage/{knob}", cur, want,
                                _THP_WHY[knob]))
        sev = "warn" if cur in ("always", "force") else "info"
        r.findings.append(CORE[f"thp.{knob}"](
            _THP_WHY[knob], f"/sys/kernel/mm/transparent_hugepage/{knob} = {cur}",
            title=f"THP {knob} is {cur}; profile {p.name} wants {want}", severity=sev))


def _host_findings(r: Report) -> None:
    host = r.host
    for key, value in host.cmdline_params:
        if key in ("hugepages", "hugepagesz", "default_hugepagesz", "transparent_hugepage",
                   "transparent_hugepage_shmem"):
            why = {"transparent_hugepage": "boot-time THP mode; the runtime knob may differ",
                   "default_hugepagesz": "sets the size /proc/meminfo and vm.nr_hugepages "
                                         "refer to; with 1G, 2 MiB pages need their own "
                                         "hugepagesz=2M hugepages=N to be reserved at boot",
                   }.get(key, "boot-time huge page reservation")
            r.findings.append(CORE[f"cmdline.{key}"](
                why, host.cmdline or "", title=f"Kernel command line: {key}={value}"))
    users = {p.size_kb for p in r.pools}
    for pool in host.pools:
        avail = pool.available_pages
        if not pool.nr_pages or avail is None or avail <= 0:
            continue
        planned = next((p for p in r.pools if p.size_kb == pool.size_kb), None)
        waiting = 0
        if planned:  # pages meant for instances that are not holding them yet
            waiting = planned.target_pages - planned.foreign_pages - sum(
                i.demand.held_pages for i in r.instances
                if i.demand and i.id in planned.instances)
        unused = avail - max(0, waiting)
        if unused > 0:
            r.findings.append(CORE["pool.unused"](
                "Pool pages are lost to the OS until released. Something not running now may "
                "need them at its next start; otherwise lower the pool.",
                f"hugepages-{pool.size_kb}kB: nr {pool.nr_pages}, free {pool.free_pages}, "
                f"resv {pool.resv_pages}" + ("" if pool.size_kb in users else ", no demand"),
                title=f"{unused} reserved {fmt_page(pool.size_kb)} pages "
                      f"({fmt_bytes(unused * pool.size_bytes)}) are used by nothing found"))
    if host.in_container:
        def cap(n: int | None) -> str:
            return "unlimited" if n is None else fmt_bytes(n)
        own = "; ".join(f"{c.size}: faults {cap(c.limit_bytes)}, reservations "
                        f"{cap(c.rsvd_limit_bytes)}" for c in host.cgroup_hugetlb)
        r.findings.append(CORE["host.container"](
            "It sees only the processes of its own PID namespace: databases on the host or in "
            "other containers are not found (run it on the host, or in the database's own "
            "container). The pools it reads (/proc/meminfo, /sys/kernel/mm/hugepages) are the "
            "host's, shared by every container, and free pages may be promised to another pod; "
            "the kernel command line is the host's, /etc is the container's. What this "
            "container may use is its own cgroup's limit: "
            + (own or "no hugetlb limit on hpadvise's own cgroup") + ".",
            ", ".join(host.container_evidence),
            title="hpadvise runs inside a container: the host's processes and boot "
                  "configuration are out of its sight"))
    if host.thp.enabled.value is None:
        r.findings.append(CORE["thp.unavailable"](
            "Kernel without THP, or a container hiding /sys."))
    if not r.instances:
        r.findings.append(CORE["instances.none"](
            "Nothing to size. Start the database, or name a stopped PostgreSQL cluster with "
            "--pgdata DIR, or a server with --dsn."))


def inspect(sr, profile_name: str = "oltp", targets=None, engine_names=None) -> Report:
    """The whole `check` flow: read the host, discover instances, build the plan."""
    from . import host as host_mod
    from . import profiles
    from .cgroups import limits as cgroup_limits
    from .cgroups import memory_limit
    from .cgroups import mounts as cgroup_mounts
    from .engines import Targets, registry
    from .procs import ProcTable

    engines = {e.name: e for e in (registry.all() if not engine_names
                                   else [registry.get(n) for n in engine_names])}
    profile = profiles.load(profile_name, registry.profile_schemas())
    facts = host_mod.collect(sr)
    procs = ProcTable(sr)
    instances: list[Instance] = []
    for eng in engines.values():
        instances.extend(eng.discover(facts, procs, targets or Targets()))
    hier = cgroup_mounts(sr)
    for inst in instances:  # the hugetlb limits on each process decide what it can hold
        if inst.pid is not None:
            inst.cgroup = cgroup_limits(sr, inst.pid, hier)
            inst.memory_limit = memory_limit(sr, inst.pid, hier)
    seen: set[str] = set()
    for inst in instances:  # IDs key the plan: two servers claiming one port stay apart
        if inst.id in seen and inst.pid:
            inst.id = f"{inst.id}@pid{inst.pid}"
        seen.add(inst.id)
    if len(facts.numa_nodes) > 1:
        _bind_nodes(facts, procs, instances)
    report = build(facts, instances, profile, engines)
    report.notes = [str(n) for n in sr.notes]
    return report


def _bind_nodes(host: HostFacts, procs, instances: list[Instance]) -> None:
    """An instance whose process may allocate from one node only gets its demand there."""
    from .procs import Proc
    for inst in instances:
        if inst.demand is None or inst.pid is None or inst.demand.node is not None:
            continue
        allowed = Proc(procs.sr, inst.pid).mems_allowed
        if allowed and len(allowed) == 1 and allowed[0] in host.numa_nodes:
            inst.demand = dataclasses.replace(inst.demand, node=allowed[0])
