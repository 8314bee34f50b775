"""One pipeline from "these instances on this host (or snapshot), this profile" to a plan:
read the host, discover the instances, read their cgroups, build the plan once. `check`,
`apply`, `size`, `k8s`, `validate` and the engines' benchmark code all go through here."""

from __future__ import annotations

import dataclasses
import os

from ..facts import host as host_mod
from ..api import profiles
from ..facts.cgroups import limits as cgroup_limits
from ..facts.cgroups import memory_limit
from ..facts.cgroups import mounts as cgroup_mounts
from ..api.engines import Engine, error_line, registry
from ..kit.errors import InputError
from ..kit.findings import CORE
from ..facts.host import HostFacts
from ..api.model import SCRATCH_MARK, Instance, Recorded, Targets
from ..api.profiles import Profile
from ..facts.numa import binding
from .plan import Report, build, keeps_pages
from ..facts.procs import ProcTable
from ..facts.thp_exec import process_mode, unadvised_thp_kb
from ..facts.thp_rules import thp_sizes
from .thp_regions import attach as attach_regions
from ..facts.sysroot import SysRoot, parse_kv
from ..facts.sysctls import shm_cred


def inspect(sr: SysRoot, profile_name: str = "oltp", targets: Targets | None = None,
            engine_names: list[str] | None = None, scratch: bool = False,
            measure_limits: bool = False, journal: str | None = None) -> Report:
    """Read the host, discover the instances of these engines (None: every installed one)
    and build the plan for all of them: what `check` shows. validate's own scratch servers
    are left out unless `scratch` (validate planning for them). `measure_limits`: inside a
    cgroup namespace, fault free huge pages in a child process to find the limits above
    (limitprobe.py), then plan again with what it found."""
    return report_of(survey(sr, profile_name, targets, engine_names, scratch, journal),
                     measure_limits=measure_limits)


@dataclasses.dataclass
class Survey:
    """What was read before any plan: the host, the profile, the engines and their instances
    (IDs settled, cgroups, NUMA bindings and process THP modes read), what the active
    applies recorded, and what could not be read. `report_of` plans all of it (check),
    `plan_of` some of the instances (apply)."""
    sr: SysRoot
    facts: HostFacts
    profile: Profile
    engines: dict[str, Engine]
    instances: list[Instance]
    recorded: dict[str, Recorded]
    smaps_of: dict[int, str]  # by id(instance): its main process's mappings, for thp_regions
    left_out: list[Instance]  # validate's scratch servers
    failed: list[tuple[str, str]]  # (engine, what went wrong)


def survey(sr: SysRoot, profile_name: str = "oltp", targets: Targets | None = None,
           engine_names: list[str] | None = None, scratch: bool = False,
           journal: str | None = None) -> Survey:
    """Everything inspect reads, without the plan."""
    engines = {e.name: e for e in (registry.all() if not engine_names
                                   else [registry.get(n) for n in engine_names])}
    profile = profiles.load(profile_name, registry.profile_schemas())
    facts = host_mod.collect(sr)
    procs = ProcTable(sr)
    targets = _with_remembered(targets or Targets(), engines, sr, journal)
    instances: list[Instance] = []
    failed: list[tuple[str, str]] = []  # (engine, what went wrong)
    for eng in engines.values():
        try:
            instances.extend(eng.discover(facts, procs, targets))
        except InputError as exc:  # what it was given is wrong: its error, not the report's
            failed.append((eng.name, str(exc)))
        except Exception as exc:  # one engine's failure must not cost the others' report
            if os.environ.get("HPADVISE_DEBUG"):  # the traceback, as the CLI shows its own
                raise
            failed.append((eng.name, f"discovery failed: {error_line(exc)}"))
    instances, left_out = _without_scratch(sr, engines, instances)
    if scratch:
        instances, left_out = instances + left_out, []
    smaps_of = _read_processes(sr, facts, instances, scratch, journal)
    own_cgroups(facts, instances)
    _unique_ids(instances, engines)
    if len(facts.numa_nodes) > 1:
        bind_nodes(facts, procs, instances)
    if sr.live:  # what the active applies planned that is not running now keeps its pages
        from ..ledger.journal import journal_dir
        from ..ledger.recorded import absent
        instances += absent(journal_dir(journal), instances, engines)
    return Survey(sr, facts, profile, engines, instances,
                  _recorded(sr, journal, instances, engines), smaps_of, left_out, failed)


def joined(s: Survey, engine: str, journal: str | None = None) -> Survey:
    """The survey with validate's own servers as they run now: `engine` finds its instances
    again, and its scratch servers (SCRATCH_MARK), read as survey reads each process, take
    the place of those it had; the host's facts and every other instance stay as first read.
    validate surveys the host once, before it changes anything, and plans each server it
    starts from that survey: apply's plan for the host as the user has it, not as validate's
    held pools and THP phases leave it."""
    eng = s.engines[engine]
    # copies: the instances the survey holds (and the options that carry it) stay as read
    running, _ = _without_scratch(s.sr, s.engines, [dataclasses.replace(i)
                                                    for i in s.instances])
    procs = ProcTable(s.sr)
    _, mine = _without_scratch(s.sr, s.engines, eng.discover(s.facts, procs, Targets()))
    _read_processes(s.sr, s.facts, mine, True, journal)
    instances = running + mine
    _unique_ids(instances, s.engines)
    if len(s.facts.numa_nodes) > 1:
        bind_nodes(s.facts, procs, mine)
    return dataclasses.replace(s, instances=instances, left_out=[])


def _read_processes(sr: SysRoot, facts: HostFacts, instances: list[Instance], scratch: bool,
                    journal: str | None) -> dict[int, str]:
    """Each running instance's cgroup limits, THP mode and SysV credentials, read off its
    main process; returns the mappings the report's THP regions need (by id(instance))."""
    hier = cgroup_mounts(sr)
    gives = bool(thp_sizes(facts.thp, "enabled", advised=False))  # unadvised memory THP
    smaps_of: dict[int, str] = {}  # by the instance object: IDs may still change below
    for inst in instances:  # the hugetlb limits on each process decide what it can hold
        if inst.pid is not None:
            inst.cgroup = cgroup_limits(sr, inst.pid, hier)
            inst.memory_limit = memory_limit(sr, inst.pid, hier)
            # its main process's mappings: which of them THP can back (thp_regions.py), for
            # the report; validate's own inspections (`scratch`) need them only where the host
            # gives unadvised memory THP, and do not walk its running servers' page tables
            smaps = sr.read(f"/proc/{inst.pid}/smaps", quiet_missing=True) \
                if inst.running and (gives or not scratch) else None
            if smaps and not scratch:
                smaps_of[id(inst)] = smaps
            status = sr.read(f"/proc/{inst.pid}/status", quiet_missing=True)
            inst.thp_mode = process_mode(status, smaps, gives, facts.thp.pmd_size_kb)
            inst.thp_unadvised_kb = unadvised_thp_kb(smaps) if smaps and gives else None
            if inst.shm_sysv and status:  # who it creates its SysV huge pages as (sysctls.py)
                ns, init = sr.readlink(f"/proc/{inst.pid}/ns/user"), sr.readlink(
                    "/proc/1/ns/user")  # unreadable (not root): taken to be the host's
                inst.shm_cred = shm_cred(parse_kv(status), bool(ns and init and ns != init))
    if sr.live and any(i.pid and i.thp_mode is None for i in instances):
        from ..ledger.journal import journal_dir
        from ..facts.procs import start_time
        from ..ledger.recorded import process_modes
        modes = process_modes(journal_dir(journal))
        for inst in instances:  # a server an active apply started in a mode of its own
            if inst.pid and inst.thp_mode is None:
                inst.thp_mode = modes.get((inst.pid, start_time(inst.pid)))
    return smaps_of


def _notes(s: Survey) -> list[str]:
    return [str(n) for n in s.sr.notes] + [
        f"{i.id}: a scratch server of a running `hpadvise validate`, left out"
        for i in s.left_out]


def plan_of(s: Survey, selected: list[Instance]) -> Report:
    """The plan for some of the surveyed instances (what `apply` acts on), built once: they,
    and the stopped instances nobody named whose pages the pools keep for their next start
    (plan.keeps_pages: the "kept" of check's plan). Running ones left out hold their pages
    as in use by others, as plan_for has them."""
    return _narrowed(s.facts, s.instances, selected, s.profile, s.engines, s.recorded,
                     _notes(s))


def _narrowed(host, instances: list[Instance], selected: list[Instance], profile, engines,
              recorded, notes: list[str]) -> Report:
    """The plan for `selected` and for the stopped instances left out whose pages the pools
    keep (plan.keeps_pages), built once: plan_of's and plan_for's one way."""
    kept = [i for i in instances if i not in selected and keeps_pages(i, engines.get(i.engine))]
    out = build(host, selected + kept, profile, engines, recorded)
    out.notes = notes
    return out


def report_of(s: Survey, measure_limits: bool = False) -> Report:
    """The plan for every surveyed instance, with what could not be read: check's report."""
    facts, failed = s.facts, s.failed
    report = build(facts, s.instances, s.profile, s.engines, s.recorded)
    if measure_limits and facts.cgroup_hidden:
        facts = dataclasses.replace(facts, limit_measured=measured_limits(report))
        report = build(facts, s.instances, s.profile, s.engines, s.recorded)
    attach_regions(report, s.smaps_of)
    report.notes = _notes(s)
    if measure_limits and not facts.cgroup_hidden:
        report.notes.append("--measure-limits: nothing to measure, no cgroup's limits are out "
                            "of sight here (outside a cgroup namespace every level is read)")
    elif measure_limits and not facts.limit_measured:
        report.notes.append("--measure-limits: nothing to measure, no instance may still "
                            "fault huge pages under limits out of sight")
    for name, why in failed:
        report.errors.append(f"{name}: {why}")
        report.findings.append(CORE["engine.failed"](
            "Its instances are missing from this report; the rest of it stands.", why,
            title=f"The {name} engine could not finish discovering"))
    return report


def _unique_ids(instances: list[Instance], engines: dict) -> None:
    """IDs key the plan: instances that would share one (two clusters on one port, each on a
    socket of its own) are named by their data directory instead (the first path their
    engine names them by), which stays the same across restarts; by pid where there is none."""
    ids = [i.id for i in instances]
    for inst in instances:
        if ids.count(inst.id) < 2:
            continue
        eng = engines.get(inst.engine)
        path = next((r for r in (eng.references(inst) if eng else ()) if r.startswith("/")),
                    None)
        old, inst.id = inst.id, f"{inst.engine}:{path}" if path else f"{inst.id}@pid{inst.pid}"
        inst.findings = [dataclasses.replace(f, instance=inst.id) if f.instance == old else f
                         for f in inst.findings]
        if inst.demand is not None:
            inst.demand = dataclasses.replace(inst.demand, instance=inst.id)


def _with_remembered(targets: Targets, engines: dict, sr: SysRoot,
                     journal: str | None) -> Targets:
    """The instances earlier applies changed and did not roll back (their journal), for the
    engines to find again when they are stopped: a pool planned for others must not drop
    the pages such an instance takes at its next start. Only on the live host."""
    if not sr.live:
        return targets
    from ..ledger.journal import journal_dir, remembered
    refs = []
    for spec in remembered(journal_dir(journal)):
        eng = engines.get(spec.get("engine"))
        ref = eng.reference_of(spec) if eng is not None else None
        if ref:
            refs.append((eng.name, ref))
    return dataclasses.replace(targets, remembered=tuple(dict.fromkeys(refs)))


def _recorded(sr: SysRoot, journal: str | None, instances: list[Instance],
              engines: dict) -> dict:
    """What the active applies recorded for the stopped instances (recorded.py): a stopped
    instance keeps at least that in the plan. Only on the live host."""
    if not sr.live:
        return {}
    from ..ledger.journal import journal_dir
    from ..ledger.recorded import for_stopped
    return for_stopped(journal_dir(journal), instances, engines)


def _without_scratch(sr: SysRoot, engines: dict, instances: list[Instance]):
    """validate's own scratch servers (SCRATCH_MARK in a directory their engine names them
    by) apart from the host's instances: (instances, scratch servers)."""
    keep, scratch = [], []
    for inst in instances:
        eng = engines.get(inst.engine)
        refs = eng.references(inst) if eng is not None else ()
        marked = any(r.startswith("/") and sr.exists(f"{r.rstrip('/')}/{SCRATCH_MARK}")
                     for r in refs)
        (scratch if marked else keep).append(inst)
    return keep, scratch


def measured_limits(report: Report) -> tuple:
    """For every page size an instance's unseen limits concern (cgroup.hugetlb.unseen), one
    probe up to the most pages any of them may still fault, in free unreserved pages only."""
    from .host_findings import left_to_fault
    from ..facts.limitprobe import measure
    unseen = {f.instance for f in report.findings if f.code == "cgroup.hugetlb.unseen"}
    want: dict[int, int] = {}
    for inst in report.instances:
        if inst.id in unseen and inst.demand:
            for page_kb, pages in inst.demand.pages.items():
                want[page_kb] = max(want.get(page_kb, 0), left_to_fault(inst, page_kb, pages))
    out = []
    for page_kb, pages in sorted(want.items()):
        pool = report.host.pool(page_kb)
        if pool is None or not pages:
            continue
        out.append(measure(page_kb, pages, (pool.free_pages or 0) - (pool.resv_pages or 0)))
    return tuple(out)


def own_cgroups(facts: HostFacts, instances: list[Instance]) -> None:
    """Inside a container, a server that is not running yet (a stopped cluster, a planned
    configuration) will start where hpadvise runs (an init container before the server's, the
    server's own container): hpadvise's own cgroup limits are the ones it will meet, a limit
    of 0 included (what the kubelet sets for a huge page size a container did not request).
    On the host it will start in its service manager's cgroup, which is not known before it
    starts, so nothing is assumed there."""
    if not facts.in_container:
        return
    for inst in instances:
        if inst.pid is None and not inst.running:
            inst.cgroup, inst.memory_limit = facts.cgroup_hugetlb, facts.memory_limit
            inst.cgroup_from = "hpadvise"


def plan_for(report: Report, selected: list[Instance]) -> Report:
    """The plan for some of a report's instances only: the same host and profile, no second
    inspection (what plan_of makes from the survey, from a report already built). The pages
    of stopped instances kept for their next start stay in the pools (pages running ones hold
    count as in use by others)."""
    return _narrowed(report.host, report.instances, selected, report.profile, report.engines,
                     report.recorded, report.notes)


def select(report: Report | Survey, engines: list[str] | None, wanted: list[str] | None
           ) -> list[Instance]:
    """The instances named (by ID or by any reference their engine declares: data directory,
    port, socket ...), or, with none named, every instance of these engines (`apply --db
    postgres`: the plan for every cluster; --instance narrows it)."""
    from ..kit.errors import InputError
    names = sorted(report.engines) if engines is None else engines
    cands = [i for i in report.instances if i.engine in names]
    if wanted:
        out: list[Instance] = []
        for w in wanted:
            found = [i for i in cands if _refers(report, i, w)]
            if not found:
                known = ", ".join(i.id for i in cands if not i.found) or "none found"
                raise InputError(f"no {'/'.join(names)} instance {w!r} (instances: {known})")
            if len(found) > 1:  # two clusters on one port, each on its own socket
                ids = ", ".join(i.id for i in found)
                raise InputError(f"{w!r} names {len(found)} instances ({ids}); name one by "
                                 "its ID or data directory")
            if found[0] not in out:
                out.append(found[0])
        return out
    return [i for i in cands if not i.found]  # stopped ones nobody named: kept, not changed


def _refers(report: Report | Survey, inst: Instance, name: str) -> bool:
    """Whether `name` names this instance: its ID, the part after "engine:", or one of the
    references its engine declares (a path compares by its real path)."""
    if name in (inst.id, inst.id.split(":", 1)[-1]):
        return True
    eng = report.engines.get(inst.engine)
    for ref in (eng.references(inst) if eng is not None else ()):
        if name == ref or (ref.startswith("/") and os.path.realpath(name) ==
                           os.path.realpath(ref)):
            return True
    return False


def bind_nodes(host: HostFacts, procs, instances: list[Instance]) -> None:
    """An instance whose huge pages can come from one node only (its cpuset's mems, an
    MPOL_BIND memory policy: numa.py) gets its demand there."""
    for inst in instances:
        if inst.demand is None or inst.pid is None or inst.demand.node is not None:
            continue
        b = binding(procs.sr, inst.pid, host.numa_nodes)
        if b is None:
            continue
        inst.numa_binding = str(b)
        if len(b.nodes) == 1:
            inst.demand = dataclasses.replace(inst.demand, node=b.nodes[0])
