"""The plan's findings about the host and the instances' surroundings: THP resolved against
every instance's needs, the kernel command line, unused pool pages, hpadvise itself in a
container, and each instance's hugetlb cgroup (whether it can hold its pages)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..kit.knob_id import THP_FILES, KnobId
from ..facts.thp_knobs import THP
from ..facts.cgroups import size_name, workload
from ..facts.cgroups import verdict as cgroup_verdict
from ..kit.findings import CORE
from ..kit.paths import THP_DIR
from ..facts.host import CMDLINE_SETS_BOOT
from ..api.model import Change, Instance
from ..kit.sizing import cmdline_kb, fmt_bytes, fmt_page, k8s_resource, pool_label
from .thp_policy import (kept_by_itself, own_mode, own_modes, plan_sizes, process_changes,
                         shmem_need, taken)

if TYPE_CHECKING:
    from ..api.engines import Engine
    from ..api.model import Report


def thp(r: Report, engines: dict[str, Engine] | None = None) -> None:
    """THP per the profile, adjusted so that every instance found can live with it: one plan
    for the host. A value no instance objects to is kept; otherwise the preferred value all
    accept, with a finding that says who needed what. Where no value suits them all, the
    servers that only object to more THP get a mode of their own (thp_policy.process_changes)
    and the host the value the others need; where none can, a warning. A server that runs in
    a mode of its own already is not held against the host-wide value."""
    t, p = r.host.thp, r.profile
    needs: dict[str, list[tuple[set[str], str]]] = {}
    limits: list[tuple[object, set[str], str]] = []  # (instance, enabled values, why)
    for inst in r.instances:
        eng = (engines or {}).get(inst.engine)
        if eng is not None:
            for knob, need in eng.thp_needs(inst, p).items():
                if knob == "enabled" and "always" not in need[0]:
                    limits.append((inst, set(need[0]), need[1]))
                    if kept_by_itself(inst.thp_mode, need[0]):
                        continue  # its own mode keeps it there: thp.own_mode says so
                    if p.engine(inst.engine).get("thp", "inherit") != "inherit" \
                            and own_mode(set(need[0]), r.host.kernel):
                        continue  # the profile keeps this engine in a mode of its own
                needs.setdefault(knob, []).append(need)
    shmem = shmem_need(r.host.thp_users)  # never take shmem THP from a process that has it
    if shmem is not None:
        needs.setdefault("shmem_enabled", []).append(shmem)
    planned: dict[str, str | None] = {}
    for knob in THP_FILES:
        want, cur = p.thp_wants(knob), getattr(t, knob).value
        if cur is None:
            continue
        if knob in needs:
            ok = set.intersection(*(set(a) for a, _ in needs[knob]))
            why = "; ".join(w for _, w in needs[knob])
            base = cur if want == "keep" else want
            wider = [a for a, _ in needs[knob] if knob != "enabled" or "always" in a]
            others = set.intersection(*(set(a) for a in wider)) if wider else set()
            if not ok and knob == "enabled" and others and len(wider) < len(needs[knob]) \
                    and all(own_mode(a, r.host.kernel) for a, _ in needs[knob]
                            if "always" not in a):
                # the servers that object to more THP get a mode of their own instead
                pick = base if base in others else next(
                    v for v in THP[knob].prefer + tuple(sorted(others)) if v in others)
                r.findings.append(CORE["thp.resolved"](
                    f"{pick} is what the servers that need THP need; the others get a THP "
                    "mode of their own (below).", why,
                    title=f"THP {knob}: {pick}, with modes of their own for the others"))
                want = pick
            elif not ok:
                r.findings.append(CORE["thp.conflict"](
                    "No single value suits every instance on this host; keeping the profile's. "
                    "Consider separate hosts, or static huge pages for one of them.", why,
                    title=f"Instances need different THP {knob} values"))
            elif base not in ok:
                pick = next(v for v in THP[knob].prefer + tuple(sorted(ok)) if v in ok)
                r.findings.append(CORE["thp.resolved"](
                    f"{pick} is what every instance here can live with.", why,
                    title=f"THP {knob}: {pick} instead of {base}"))
                want = pick
        planned[knob] = cur if want == "keep" else want
        if want == "keep" or cur == want:
            continue
        r.changes.append(Change("thp", f"transparent_hugepage/{knob}", cur, want,
                                THP[knob].why, knob=knob, id=KnobId.thp(knob)))
        sev = "warn" if cur in ("always", "force") else "info"
        r.findings.append(THP[knob].code(
            THP[knob].why, f"{THP_DIR}/{knob} = {cur}",
            title=f"THP {knob} is {cur}; profile {p.name} wants {want}", severity=sev))
    plan_sizes(r, planned)
    if planned.get("enabled"):
        # what the profile asks for each engine's servers (its `thp` key), beside their needs
        wishes = limits + [(i, {"madvise", "never"} if w == "madvise" else {"never"},
                            f"profile {p.name} gives {i.engine} at most THP {w}")
                           for i in r.instances
                           if (w := p.engine(i.engine).get("thp", "inherit")) != "inherit"]
        process_changes(r, planned["enabled"], wishes)
    taken(r, planned.get("enabled"))
    own_modes(r)


def host(r: Report) -> None:
    host = r.host
    for key, value in host.cmdline_params:
        if key in CMDLINE_SETS_BOOT:
            why = {"transparent_hugepage": "boot-time THP mode; the runtime knob may differ",
                   "default_hugepagesz": "sets the size /proc/meminfo and vm.nr_hugepages "
                                         "refer to; with 1G, 2 MiB pages need their own "
                                         "hugepagesz=2M hugepages=N to be reserved at boot",
                   }.get(key, "boot-time huge page reservation")
            kb = cmdline_kb(value) if key in ("hugepagesz", "default_hugepagesz") else None
            if kb is not None and host.pools and kb not in host.page_sizes_kb:
                # each architecture accepts its own sizes and ignores the rest with a warning
                # in the boot log, the hugepages= after it included (arm64 with 64 KiB pages:
                # 2M, 512M, 16G; x86-64: 2M, 1G with pdpe1gb)
                r.findings.append(CORE["cmdline.hugepagesz"](
                    f"This kernel offers {', '.join(fmt_page(k) for k in host.page_sizes_kb)}"
                    f"; it refused {key}={value} at boot, and a hugepages= that follows it "
                    "reserved nothing. Remove it, or name a size the kernel offers.",
                    host.cmdline or "", severity="warn",
                    title=f"Kernel command line: {key}={value}, a size this kernel does not "
                          "offer"))
                continue
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
            r.unused_pages[pool.size_kb] = unused
            r.findings.append(CORE["pool.unused"](
                "Pool pages are lost to the OS until released. Something not running now may "
                "need them at its next start; otherwise lower the pool.",
                f"{pool_label(pool.size_kb)}: nr {pool.nr_pages}, free {pool.free_pages}, "
                f"resv {pool.resv_pages}" + ("" if pool.size_kb in users else ", no demand"),
                title=f"{unused} reserved {fmt_page(pool.size_kb)} "
                      f"{'page' if unused == 1 else 'pages'} "
                      f"({fmt_bytes(unused * pool.size_bytes)}) "
                      f"{'is' if unused == 1 else 'are'} used by nothing found"))
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
            + (own or "no hugetlb limit on hpadvise's own cgroup") + (
                "; the cgroups above it are out of sight from inside its cgroup namespace, so "
                "no limit seen is not no limit" if host.cgroup_hidden else "") + ".",
            ", ".join(host.container_evidence),
            title="hpadvise runs inside a container: the host's processes and boot "
                  "configuration are out of its sight"))
    if host.thp.enabled.value is None:
        r.findings.append(CORE["thp.unavailable"](
            "Kernel without THP, or a container hiding /sys."))
    if not r.instances:
        names = sorted(r.engines)  # where --db narrowed the check, what it looked for
        r.findings.append(CORE["instances.none"](
            "Nothing to size. Start the database, name a server with --dsn, or a stopped "
            "one with its engine's option (`hpadvise check --help` lists them).",
            title=f"No {' or '.join(names)} instance found" if 0 < len(names) <= 2 else None))


def cgroup(r: Report, inst: Instance, page_kb: int, pages: int | None = None) -> str | None:
    """Findings for an instance whose hugetlb cgroup cannot hold its pages (cgroups.py explains
    the two limits). The reason when the plan must not put it on huge pages, else None."""
    pages = inst.demand.pages[page_kb] if pages is None else pages
    v = cgroup_verdict(inst.cgroup, page_kb, pages)
    _accounted(r, inst, pages * page_kb * 1024)
    if v is None or v.kind == "fits":
        if v is not None:
            _hit(r, inst, v.limit)
        return _unseen(r, inst, page_kb, pages, v)
    lim, need, iid = v.limit, v.need_bytes, inst.id
    pages = f"{pages} x {fmt_page(page_kb)}"
    _hit(r, inst, lim)
    cap = lim.rsvd_limit_bytes if v.kind == "reserve_short" else lim.limit_bytes
    fix = (f"Raise {lim.file('max')} and {lim.file('rsvd.max')} to at least {need} bytes, "
           f"or turn huge pages off for this instance (the plan does).")
    evidence = (f"needs {need} bytes ({pages}); {lim.file('max')} = "
                f"{lim.limit_bytes if lim.limit_bytes is not None else 'max'}, "
                f"{lim.file('rsvd.max')} = "
                f"{lim.rsvd_limit_bytes if lim.rsvd_limit_bytes is not None else 'max'}")
    who = workload(lim.cgroup)
    if who:
        evidence += f"; {who}"
    when = ""
    if inst.cgroup_from == "hpadvise":  # not running: it will start where hpadvise runs
        evidence += "; hpadvise's own cgroup, where the server will start"
        when = " at its first start"
    if v.kind == "sigbus":
        r.findings.append(CORE["cgroup.hugetlb.sigbus"](
            "Reservations are not limited, so the mapping succeeds and the server starts (it "
            "even reports huge pages as free: /proc/meminfo is not per cgroup); the first touch "
            "past the fault limit kills it with SIGBUS. " + fix + " Or set the reservation "
            f"limit to {lim.limit_bytes} bytes, so that it fails cleanly at start instead.",
            evidence, iid, title=f"{iid} will crash with SIGBUS{when}: "
            f"{_level(lim.limit_cgroup)} allows "
            f"{fmt_bytes(cap)} of {lim.size} huge pages, it needs {fmt_bytes(need)}"))
    else:
        r.findings.append(CORE["cgroup.hugetlb.reserve_short"](
            "Mapping its huge pages fails at start: a server set to fall back runs on normal "
            "pages, one set to insist (PostgreSQL huge_pages = on) refuses to start. " + fix,
            evidence, iid, title=f"{iid} cannot reserve its huge pages: "
            f"{_level(lim.rsvd_limit_cgroup)} allows {fmt_bytes(cap)} of {lim.size}, it needs "
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
    return (f"cgroup {lim.limit_cgroup if v.kind == 'sigbus' else lim.rsvd_limit_cgroup} "
            f"allows {fmt_bytes(cap)} of {lim.size} huge pages, it needs {fmt_bytes(need)}")


def _level(cgroup: str | None) -> str:
    """The cgroup that sets a limit, and whose it is where its path says (a pod's, a
    container's): which level of a Kubernetes pod bites."""
    who = workload(cgroup or "")
    if who and "container" in who:
        return f"cgroup {cgroup} (the container's limit: {who})"
    if who:
        return f"cgroup {cgroup} (the pod's limit: {who})" if "pod" in who else \
            f"cgroup {cgroup} ({who})"
    return f"cgroup {cgroup}"


def _hit(r: Report, inst: Instance, lim) -> None:
    if lim.max_events:
        r.findings.append(CORE["cgroup.hugetlb.hit"](
            "A process in this cgroup touched a huge page beyond the fault limit and was "
            "killed with SIGBUS (PostgreSQL logs \"terminated by signal 7: Bus error\" and "
            "restarts; a JVM dies).", f"{lim.mount}{lim.cgroup.rstrip('/')}/hugetlb.{lim.size}."
            f"{'events: max' if lim.version == 2 else 'failcnt:'} {lim.max_events}", inst.id,
            title=f"{inst.id}: its cgroup's {lim.size} huge page limit was hit "
                  f"{lim.max_events} times"))


def left_to_fault(inst: Instance, page_kb: int, pages: int) -> int:
    """Pages of this size the instance may still fault: its need less what its own cgroup has
    faulted already (a running server's)."""
    v = cgroup_verdict(inst.cgroup, page_kb, pages)
    used = (v.limit.usage_bytes or 0) if v is not None else 0
    return max(0, pages - used // (page_kb * 1024))


def _unseen(r: Report, inst: Instance, page_kb: int, pages: int, v) -> str | None:
    """Inside a cgroup namespace the cgroups above are out of sight, and so are their limits
    (a Kubernetes pod's, a slice's): no limit seen is not no limit. Unless every page it needs
    is faulted already in its own cgroup (no further fault can pass a limit), or a probe
    (`check --measure-limits`, limitprobe.py) faulted as many more pages without SIGBUS, the
    plan keeps the instance off huge pages until it is checked from the node. The reason, or
    None."""
    if not r.host.cgroup_hidden:
        return None
    need = pages * page_kb * 1024
    left = left_to_fault(inst, page_kb, pages)
    if left == 0:
        return None
    size = f"hugetlb.{size_name(page_kb)}"
    m = next((m for m in r.host.limit_measured if m.page_kb == page_kb), None)
    if m is not None and not m.refused and m.touched >= left:
        r.findings.append(CORE["cgroup.hugetlb.measured"](
            "A child process faulted that many huge pages in hpadvise's own cgroup and freed "
            "them: the limits above (out of sight in this cgroup namespace) let the instance "
            "fault the rest of its need, as the pool and its neighbours stood at that moment.",
            f"needs {left} more of {pages} pages; {m.said()}", inst.id,
            title=f"{inst.id}: the limits above its container allow its {fmt_bytes(need)} of "
                  "huge pages (measured)"))
        return None
    if m is not None and m.sigbus:
        r.findings.append(CORE["cgroup.hugetlb.sigbus"](
            "A fault limit out of sight above this cgroup (a pod's, a slice's) stops faults "
            f"after {m.touched} more pages: the server dies of SIGBUS when it touches its "
            "buffers past it. Raise that limit (the pod's huge page resource) or turn huge "
            "pages off for this instance (the plan does).",
            f"needs {left} more of {pages} pages; {m.said()}", inst.id,
            title=f"{inst.id} will crash with SIGBUS: a limit above its container allows "
                  f"{m.touched} more {fmt_page(page_kb)} pages, it needs {left} (measured)"))
        return f"a hugetlb limit above allows {m.touched} more pages, it needs {left} (measured)"
    r.findings.append(CORE["cgroup.hugetlb.unseen"](
        "hpadvise runs in a cgroup namespace: the cgroups above its own (a pod's, a slice's) "
        "are out of its sight, and a fault limit there below the need kills the server with "
        "SIGBUS at a touch. The plan keeps it off huge pages. Check from the node (`hpadvise "
        "check` on the host sees every level), read the pod's limit (the container's "
        f"{k8s_resource(page_kb)} resource), or measure it from here (`check "
        "--measure-limits`, which faults free huge pages in a child process).",
        f"needs {need} bytes; {', '.join(r.host.cgroup_hidden)} is a cgroup namespace's view "
        f"(its root has cgroup.type); {size}.max above it: unknown"
        + (f"; {m.said()}" if m is not None else ""), inst.id,
        title=f"{inst.id}: the huge page limits above its container are out of sight"))
    return "the hugetlb limits of the cgroups above are out of sight (a cgroup namespace)"


def _accounted(r: Report, inst: Instance, need: int) -> None:
    """Where the cgroup v2 mount charges huge pages to the memory controller
    (memory_hugetlb_accounting, Linux 6.6+), memory.max must hold them besides the rest."""
    mem = inst.memory_limit
    if r.host.hugetlb_accounting and mem is not None and mem.limit_bytes < need:
        r.findings.append(CORE["cgroup.memory.hugetlb_charged"](
            "The cgroup v2 hierarchy is mounted with memory_hugetlb_accounting: huge pages are "
            "charged to memory.max as well, so a memory limit sized beside the huge pages "
            f"OOM-kills the server. Raise {mem.file} by {need} bytes.",
            f"{mem.file} = {mem.limit_bytes}; huge pages {need} bytes", inst.id,
            title=f"{inst.id}: its memory limit ({fmt_bytes(mem.limit_bytes)}) must hold its "
                  f"huge pages too ({fmt_bytes(need)})"))
