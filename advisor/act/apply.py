"""`hpadvise apply`: turn a plan into journaled actions, run them, verify what took.

Order: pools (compacting before growth), THP, persistent files, engine settings, restart.
Every step reads the knob first and is skipped when it already has the value, so applying the
same plan twice changes nothing the second time.
"""

from __future__ import annotations

import os
from typing import Callable

from ..ledger import journal as jr
from ..changes.actions import (ActionError, Compact, Directory, NotStopped, Pool, SysfsChoice,
                               Sysctl)
from ..api.engines import Engine
from ..api.engines import action_from_spec as from_spec
from ..kit.errors import InputError
from ..kit.paths import knob_path
from ..planning.plan import Report
from ..changes.process_thp import ProcessThp, how as own_mode_how
from ..changes.unit_thp import MIN_SYSTEMD, UnitThp, systemd_version
from ..facts.procs import systemd_unit
from ..ledger.recorded import for_header
from ..changes.gigantic import pull_in
from ..kit.sizing import cmdline_size, fmt_bytes, fmt_page
from .steps import ApplyPlan, Result, Step


def prepare(report: Report, engines: dict[str, Engine], *, restart: bool, persist: bool,
            read_only: bool = False,
            sys_root: str = "", persist_root: str = "") -> ApplyPlan:
    ap = ApplyPlan(report, report.instances, [])
    if report.blocked:
        raise InputError("refusing to apply: " + "; ".join(report.blocked))
    if report.errors:
        raise InputError("refusing to apply while check reports errors: " + report.errors[0])
    host = report.host

    # 1. pools
    for pp in report.pools:
        pool = host.pool(pp.size_kb)
        claimed = pool.claimed_pages if pool else 0
        if pp.target_pages < claimed:
            raise InputError(
                f"refusing to shrink the {fmt_page(pp.size_kb)} pool to {pp.target_pages}: "
                f"{claimed} pages are in use or reserved by running processes")
        if pp.target_pages > (pp.current_pages or 0):
            ap.steps.append(Step(Compact(sys_root + Compact.PATH), True,
                                 "free contiguous memory first", "runtime", old=None))
        why = c.reason if (c := report.pool_change(pp.size_kb)) else ""
        if pp.per_node:  # NUMA: each node's pool, read back per node
            for node, pages in pp.per_node:
                ap.steps.append(Step(Pool(pp.size_kb, node=node, root=sys_root), pages,
                                     why or "per-node pool", "runtime"))
        else:
            ap.steps.append(Step(Pool(pp.size_kb, root=sys_root), pp.target_pages, why,
                                 "runtime"))
    # 2. THP and the declared kernel settings (facts/sysctls.py)
    for c in report.changes:
        if c.kind == "thp" and c.id:
            ap.steps.append(Step(SysfsChoice(sys_root + knob_path(c.id)),
                                 c.recommended, c.reason, "runtime"))
        elif c.kind == "sysctl" and c.id:
            ap.steps.append(Step(Sysctl(sys_root + knob_path(c.id)), c.recommended,
                                 c.reason, "runtime"))
    # 3. persistence
    if persist:
        from .persist import persist_steps
        persist_steps(ap, persist_root)
    else:
        ap.notices.append("--no-persist: the runtime changes last until the next reboot.")
    # 4. engine settings, then 5. restarts, in the actions' own order (a cluster manager's
    # replicas before its leader). A change two instances share (one cluster-wide
    # configuration for several members) is made once.
    restarts: list[Step] = []
    for inst in report.instances:
        eng = engines.get(inst.engine)
        if eng is None:
            continue
        ap.notices += eng.advice(inst, report.changes)
        acts = eng.actions(inst, report.changes)
        for a, value in acts:
            if not any(s.action.identity() == a.identity() for s in ap.steps):
                ap.steps.append(Step(a, value, "profile", "engine"))
        placed = report.placements.get(inst.id)
        partly = inst.backing != "hugetlb" or (inst.demand is not None and inst.demand.short)
        own = next((c for c in report.changes if c.kind == "process_thp"
                    and c.instance == inst.id), None)  # a THP mode of its own (prctl)
        if own is not None and inst.running:
            own = _through_unit(ap, inst, own) if not sys_root else own  # this host's units
        if inst.running and (acts or own or (partly and placed is not None
                                             and placed.status == "pool")):
            ra = eng.restart_action(inst)
            if ra is None:
                ap.restart_unaided.append(inst.id)
                if own:
                    ap.notices.append(f"{inst.id}: restart it in THP mode {own.recommended} "
                                      f"yourself: {own_mode_how(own.recommended)}")
                continue
            step = Step(ra, True, "huge pages are reserved when the server starts", "restart")
            if own:  # the same restart, in its own THP mode: journaled with the mode it had
                pages = bool(acts) or (partly and placed is not None
                                       and placed.status == "pool")
                step = Step(ProcessThp(ra, pages=pages), own.recommended,
                            own.reason, "restart")
            if restart:
                restarts.append(step)
            else:
                ap.restart_pending.append(inst.id)
    ap.steps = _with_directories(ap.steps)
    # one at a time: a cluster manager's replicas before its leader, else by instance
    ap.steps += sorted(restarts, key=lambda s: (getattr(s.action, "order", 0),
                                                s.action.instance or ""))
    for s in ap.steps:
        try:
            # a restart has no value, but one in a THP mode of its own has the mode it runs in
            s.old = s.action.get() if s.phase != "restart" or isinstance(s.action, ProcessThp) \
                else None
        except ActionError as exc:
            if not read_only:
                raise InputError(f"{exc}; nothing was changed") from None
            # A plan to print (--dry-run, --print-script) as a user who cannot read it all:
            # the step is kept, and the user is told what was assumed.
            s.unread = str(exc)
            ap.notices.append(f"assumed: {exc}, so its current value is unknown; the change "
                              "is planned without comparing (run as root to compare)")
    # a restart is only needed when something it depends on changes
    if not any(s.needed for s in ap.steps if s.phase != "restart"):
        for s in ap.steps:
            if s.phase == "restart" and _on_huge_pages(report, s) \
                    and not isinstance(s.action, ProcessThp):
                s.old = s.new
    return ap


def _through_unit(ap: ApplyPlan, inst, own):
    """A server that runs as a systemd unit is restarted by PID 1, which a prctl in hpadvise
    does not reach: its mode of its own goes into the unit (MemoryTHP=, unit_thp.py), a step
    before its restart. Where systemd is older than MemoryTHP=, the mode is not given (said
    why, with the alternative) and None is returned."""
    unit = systemd_unit(inst.pid) if inst.pid else None
    if unit is None:
        return own
    v = systemd_version()
    if v is None or v < MIN_SYSTEMD:
        ap.notices.append(
            f"{inst.id} runs as the systemd unit {unit}, which a restart by hpadvise cannot "
            f"start in THP mode {own.recommended}, and systemd {v or '(version unknown)'} has "
            f"no MemoryTHP= (it came with v{MIN_SYSTEMD}): its mode of its own is not given; "
            "start it under `hpadvise thp-exec`, or keep one host-wide THP value")
        return None
    d = UnitThp.for_unit(unit)
    ap.steps.append(Step(d, UnitThp.content(unit, own.recommended),
                         f"{own.reason}: the unit's processes start in THP mode "
                         f"{own.recommended}", "engine"))
    return own


def _with_directories(steps: list[Step]) -> list[Step]:
    """Each directory a step writes into that does not exist yet, created by a step of its
    own just before it: journaled, so that rollback removes it again (files.py)."""
    out: list[Step] = []
    made: set[str] = set()
    for s in steps:
        root = s.action.root_spec()
        for d in s.action.directories():
            if d not in made:
                made.add(d)
                out.append(Step(Directory(d, root, inside_root(root, d)), "present",
                                f"for {s.action.label}", s.phase))
        out.append(s)
    return out


def inside_root(root: dict | None, path: str) -> str | None:
    """A host path in a server's own root (/proc/PID/root/etc/x) as the root names it (/etc/x),
    for rollback to reach it again through whatever process holds the root then."""
    if not root:
        return None
    from ..facts.roots import ProcRoot
    base = ProcRoot.from_spec(root).base()
    rel = os.path.relpath(path, base)
    return None if rel.startswith("..") else "/" + rel


def _on_huge_pages(report: Report, step: Step) -> bool:
    return any(i.id == step.action.instance and i.backing == "hugetlb"
               for i in report.instances)


def describe(ap: ApplyPlan) -> list[str]:
    out = []
    for s in ap.changes:
        if s.unread:
            out.append(f"{s.action.label}: set (current value unknown: {s.unread})")
            continue
        out.append(s.action.describe(s.old, s.new) + (f"   # {s.why}" if s.why and
                                                       s.action.kind not in ("file",) else ""))
    return out


def execute(ap: ApplyPlan, directory: str, header: dict,
            say: Callable[[str], None] = lambda s: None) -> Result:
    """Run the steps under the lock, journaling each before it is made."""
    from ..ledger.stacked import refuse_stacked
    jr.open_dir(directory)
    with jr.Lock(directory):
        steps = [s for s in ap.steps if s.needed]
        if not steps:
            return Result(None, [], [], "nothing")
        refuse_stacked(directory, [s.action for s in steps], "apply")
        # what it plans for each instance, kept for them while they are stopped (recorded.py)
        j = jr.Journal.create(directory, {"pages": for_header(ap.report, ap.instances),
                                          **header})
        done: list[str] = []
        for s in steps:
            s.status = "not reached"

        def fail(s: Step, status: str, msg: str, undo: bool = True) -> Result:
            s.status = "failed"
            problems = [msg]
            if undo:
                problems += [f"could not undo {e}" for e in _undo(j)]
                for x in steps:
                    if x.status == "done" and x.phase != "restart":
                        x.status = "undone"
            j.finish(status, msg)
            return Result(j.id, done, problems, status)

        restarted: list[str] = []  # instances that run with the new settings now
        for s in steps:
            if s.phase == "restart":
                msg = _restart(ap, j, s, say)
                for x in steps if msg else ():  # the failed instance's settings: put back
                    if x.phase == "engine" and x.status == "done" \
                            and x.action.covers(s.action):
                        x.status = "undone"
                if msg and not restarted:  # nobody runs with the changes: undo them all
                    return fail(s, "restart-failed", msg + "; every other change of this "
                                "apply is undone too")
                if msg:
                    s.status = "failed"
                    problems = [msg] + _keep_for(j, steps, restarted, s)
                    j.finish("restart-failed", msg)
                    return Result(j.id, done, problems, "restart-failed")
                s.status = "done"
                restarted.append(s.action.instance)
                done.append(s.action.describe(s.old, s.new))
                continue
            old = s.action.get()  # fresh: the host may have moved since the plan was made
            s.old, s.unread = old, None
            if s.action.same(old, s.new):
                s.status = "unchanged"
                continue
            e = j.intent(s.action, old, s.new)
            say(f"{s.action.label} ...")
            try:
                s.action.set(s.new)
                ok, actual = s.action.verify(s.new)
                if isinstance(s.action, Pool) and not ok and \
                        ap.report.host.is_gigantic(s.action.size_kb):
                    actual = pull_in(ap.report.host, s.action, s.new, j, say)
                    ok = actual >= s.new
            except ActionError as exc:
                j.done(e, None)
                return fail(s, "failed", f"{exc}; rolled back what this apply had changed")
            j.done(e, actual)
            if isinstance(s.action, Pool) and not ok:
                return fail(s, "shortfall", _shortfall(s, actual))
            if not ok:
                return fail(s, "failed", f"{s.action.label}: set {s.action.show(s.new)} but "
                                         f"reads back {s.action.show(actual)}; rolled back what "
                                         "this apply had changed")
            s.status = "done"
            if s.action.kind != "compact":
                done.append(s.action.describe(old, s.new) if s.action.kind != "file"
                            else f"wrote {s.action.label}")
        j.finish("ok")
        return Result(j.id, done, [], "ok")


def verify_boot(ap: ApplyPlan, persist_root: str) -> list[str]:
    """After an apply that persisted to the real /etc: read the boot sources again and compare
    the next boot's value of every planned knob with the plan. Each mismatch is one line."""
    if persist_root not in ("", "/"):
        return []  # persisted elsewhere (a test root): the host's boot is not the question
    from ..facts.boot import read as read_boot
    from ..nextboot.boot_plan import plan_knobs
    from ..facts.sysroot import SysRoot
    host = ap.report.host
    b = read_boot(SysRoot("/"), host.default_hugepage_kb)
    out = []
    for knob, value in plan_knobs(ap.report).items():
        s = b.at_boot(knob)
        if s is None or s.value != value:
            got = f"{s.value} from {s.source}" if s else "nothing sets it"
            out.append(f"at next boot {knob.key} would be {got}, not the planned {value}")
    return out


def _undo(j: jr.Journal) -> list[str]:
    """Roll back what this apply changed, restarting nothing (no instance runs with its
    changes: a failed restart put its settings back and started it again); what could not be
    undone, one line each."""
    _, errors = jr.rollback(j, restarts=False)
    j.mark_rolled_back(errors)
    return errors


def _keep_for(j: jr.Journal, steps: list[Step], restarted: list[str], failed: Step
              ) -> list[str]:
    """A restart failed after others succeeded: those instances run with the new settings and
    need the pool, THP and persistent files as they are now, so those stay; the settings of
    the instances not restarted yet go back (the failed one's already did). Returns what to
    tell the user."""
    out = []
    for s in steps:
        if s.phase == "engine" and s.status == "done" and s.action.instance not in restarted \
                and s.action.instance != failed.action.instance:
            try:
                s.action.restore(s.old)
                s.status = "undone"
            except ActionError as exc:
                out.append(f"could not undo {s.action.label}: {exc}")
    out.append(f"kept for {', '.join(restarted)}, which run with the new settings now: the pool, "
               f"THP and persistent files of this apply; `hpadvise rollback {j.id}` undoes "
               "them and restarts those instances")
    return out


def _shortfall(s: Step, granted: int) -> str:
    a: Pool = s.action  # type: ignore[assignment]
    missing = s.new - granted
    size = cmdline_size(a.size_kb)
    return (f"the kernel granted {granted} of {s.new} {fmt_page(a.size_kb)} pages "
            f"({missing} missing, {fmt_bytes(missing * a.size_kb * 1024)}): free memory is too "
            f"fragmented or too small. Nothing was changed. Reserve them at boot instead: add "
            f"`hugepagesz={size} hugepages={s.new}` to the kernel command line")


def _restart(ap: ApplyPlan, j: jr.Journal, s: Step, say) -> str | None:
    """Restart and verify; on failure put the instance's previous settings back and start it
    again. A restart its pre-flight refuses stops nothing: the settings go back and the
    instance runs on. Returns an error message or None."""
    try:
        s.action.preflight()
    except NotStopped as exc:
        restored = _put_back(j, s)
        return f"{exc}. Put back {', '.join(restored) or 'nothing'}"
    # a plain restart has no value (True); one in a THP mode of its own journals the mode
    # the server ran in, which a restart back gives it again (ProcessThp.restore)
    new, old = (s.new, s.old) if isinstance(s.action, ProcessThp) else (True, None)
    e = j.intent(s.action, old, new)
    say(f"{s.action.label} ...")
    jr.kill_later("HPADVISE_TEST_KILL_IN_RESTART")
    try:
        s.action.set(new)
    except ActionError as exc:
        j.done(e, "failed")
        restored = _put_back(j, s)
        try:
            s.action.restore(old)
            again = "it runs again with its previous settings"
            j.done(e, jr.PUT_BACK)  # as before: rollback need not restart it again
        except ActionError as exc2:
            again = f"starting it again failed too: {exc2}"
        return f"{exc}. Put back {', '.join(restored) or 'nothing'}; {again}"
    ok, actual = s.action.verify(new)
    j.done(e, actual)
    if not ok:
        restored = _put_back(j, s)
        return (f"{s.action.label}: restarted, but {actual}; put back "
                f"{', '.join(restored) or 'nothing'}")
    return None


def _put_back(j: jr.Journal, s: Step) -> list[str]:
    """The settings this apply changed for the instance of restart step `s` (its own, and a
    cluster-wide one that covers it: Action.covers), restored."""
    restored = []
    for other in j.entries:
        a = from_spec(other.spec)
        if not a.restart and a.spec().get("engine") and a.covers(s.action):
            a.restore(other.old)
            restored.append(a.label)
    return restored
