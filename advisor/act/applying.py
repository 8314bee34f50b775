"""`apply` as a whole, without the command line: the plan for the instances asked for (one
pipeline: survey, select, plan for them (built once), prepare the steps), running it under
the journal, and the printed and JSON forms of both. The CLI parses options and confirms;
the Ansible modules and tests can drive the same functions."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from . import apply as ap
from ..ledger import journal as jr
from ..kit.errors import InputError
from ..ledger.stacked import refuse_stacked
from ..api.model import Targets
from ..planning.pipeline import plan_of, select, survey
from ..planning.plan import unsized
from ..changes.actions import Action, File
from .steps import ApplyPlan, Result
from ..facts.sysroot import SysRoot, planning_snapshot, snapshot_root, snapshot_top


@dataclass
class Request:
    engines: list[str] | None  # engine names (None: every installed engine)
    instances: list[str] = field(default_factory=list)  # IDs or references; empty: all
    profile: str = "oltp"
    restart: bool = False
    persist: bool = True
    persist_root: str = ""
    read_only: bool = False  # a plan to show (--dry-run, --print-script), maybe not as root
    journal_dir: str | None = None
    root: str = "/"  # an `hpadvise snapshot` to plan for (read_only), or the live host


def plan(req: Request) -> ApplyPlan:
    """The steps apply would take; InputError when it must not (not root, nothing found,
    nothing sizable, a blocked plan)."""
    if os.geteuid() != 0 and not req.read_only:
        raise InputError("apply changes kernel settings and needs root; run it with sudo, or "
                         "use --print-script to hand the changes to someone who is root")
    if req.persist_root not in ("", "/") and not os.path.isdir(req.persist_root):
        raise InputError(f"--persist-root {req.persist_root}: no such directory; create it, "
                         "or leave the option out to persist under /")
    root = snapshot_root(req.root)
    live = root == "/"
    if not live and not req.read_only:
        raise InputError(f"--root {req.root}: a snapshot's plan can only be shown; add "
                         "--dry-run")
    if not live and req.persist_root not in ("", "/"):
        raise InputError("--persist-root writes files and --root plans for a snapshot, "
                         "whose own /etc is read: leave out --persist-root")
    if not live and req.restart:
        raise InputError("--restart restarts servers, and a snapshot's are not this host's: "
                         "leave out --restart")
    # a snapshot's own pools and knobs are the values before (its journal is not read); every
    # engine's instances are read (a stopped one of another engine keeps its pages), and the
    # plan is built once, for the selection
    seen = survey(SysRoot(root), req.profile, Targets(), None, journal=req.journal_dir)
    names = sorted(seen.engines) if req.engines is None else req.engines
    selected = select(seen, names, req.instances)
    if not selected:
        raise InputError(f"no running or named {'/'.join(names)} instance found; "
                         "`hpadvise check` shows what is there")
    # An instance that cannot be planned (check reports an error for it, or cannot size it
    # as this user) is named and left out; the others are planned without it.
    why = {i.id: "; ".join(i.errors) for i in selected if i.errors}
    why.update({i.id: "cannot size it as this user, its configuration is unreadable (run as "
                "root or as the server's owner)" for i in selected if i.id not in why
                and unsized(i, seen.facts, seen.profile, seen.engines.get(i.engine))})
    if len(why) == len(selected):
        raise InputError("nothing can be planned: " + "; ".join(
            f"{i}: {w}" for i, w in why.items()))
    report = plan_of(seen, [i for i in selected if i.id not in why])
    # a snapshot's servers' files (their settings before) read inside it
    with contextlib.nullcontext() if live else planning_snapshot(root):
        p = ap.prepare(report,
                       report.engines, restart=req.restart, persist=req.persist,
                       persist_root=req.persist_root if live else root,
                       read_only=os.geteuid() != 0 or not live, sys_root="" if live else root)
    p.notices[:0] = [f"{i} left out, nothing of it is changed: {w}" for i, w in why.items()]
    p.instances = [i for i in p.instances if not i.found]  # kept ones: only their pages
    if not live:
        return p
    # refused before it asks (and again under the journal's lock, before the first change)
    refuse_stacked(jr.journal_dir(req.journal_dir), [s.action for s in p.steps if s.needed],
                   "apply")
    return p


def run(p: ApplyPlan, req: Request, say: Callable[[str], None] = lambda s: None
        ) -> tuple[Result, list[str]]:
    """Run the plan under the journal; the result and, after persisting to the real /etc,
    every planned knob the next boot would not give as planned."""
    names = sorted({i.engine for i in p.instances})
    argv = ["apply", "--db", *names] + [a for i in req.instances for a in ("--instance", i)] \
        + (["--restart"] if req.restart else [])
    result = ap.execute(p, jr.journal_dir(req.journal_dir),
                        {"argv": argv, "instances": [i.id for i in p.instances],
                         "profile": p.report.profile.name}, say=say)
    boot = ap.verify_boot(p, req.persist_root) \
        if result.status in ("ok", "nothing") and req.persist else []
    return result, boot


def plan_json(p: ApplyPlan, root: str = "/") -> dict:
    return as_in(root)({"schema_version": 1, "dry_run": True, "changes": changes_json(p),
                        "notices": p.notices,
                        "restart_needed": p.restart_pending + p.restart_unaided})


def as_in(root: str) -> Callable[[Any], Any]:
    """The paths of a snapshot's plan (text, or JSON's strings) as the host it holds names
    them: the snapshot's own directory taken off where a path starts with it and goes on
    into one of its top folders (etc, proc, ...), so that a path of the captured host that
    merely starts like it stays. The live host's, as they are."""
    top = snapshot_top(root)
    if top == "/":
        return lambda x: x
    names = "|".join(re.escape(n) for n in sorted(os.listdir(top)))
    at = re.compile(rf"(?<![\w./-]){re.escape(top)}/+(?=(?:{names})(?:/|\b))")

    def seen(x: Any) -> Any:
        if isinstance(x, str):
            return at.sub("/", x)
        if isinstance(x, list):
            return [seen(v) for v in x]
        if isinstance(x, dict):
            return {k: seen(v) for k, v in x.items()}
        return x
    return seen


def restart_needed(p: ApplyPlan) -> list[str]:
    """Instances whose settings this apply left changed without restarting them: those not
    restarted on purpose (no --restart), and, after a failure, those whose settings stay
    changed while their restart was not reached or failed. What the servers' own
    pending_restart says."""
    out = list(p.restart_pending)
    restarted = {s.action.instance for s in p.steps if s.phase == "restart"
                 and s.status == "done"}
    for s in p.steps:
        i = s.action.instance
        # a host-wide step among them (a directory for a file) belongs to no instance
        if i is not None and s.phase == "engine" and s.status == "done" and \
                i not in restarted and i not in out:
            out.append(i)
    if any(s.status == "done" for s in p.steps):  # its pool or settings changed
        out += [i for i in p.restart_unaided if i not in out]
    return out


def result_json(p: ApplyPlan, result: Result, boot: list[str]) -> dict:
    return {"schema_version": 1, "status": result.status, "journal": result.journal,
            "changes": changes_json(p), "problems": result.problems,
            "notices": p.notices, "restart_needed": restart_needed(p), "next_boot": boot}


def print_plan(p: ApplyPlan, root: str = "/") -> None:
    seen = as_in(root)
    print(f"Plan for {', '.join(i.id for i in p.instances)} (profile "
          f"{p.report.profile.name}" + ("" if snapshot_top(root) == "/" else
                                        f"; the host as the snapshot in {root} holds it") + "):")
    for ln in ap.describe(p) or ["nothing to change"]:
        print("  " + seen(ln).replace("\n", "\n  "))
    for n in p.notices:
        print(f"  note: {seen(n)}")


def print_result(p: ApplyPlan, req: Request, result: Result, boot: list[str]) -> None:
    for d in result.done:
        print(f"done: {d}")
    if result.status == "nothing":
        print("Nothing to change: the host already matches the plan.")
    restartable = set(p.restart_pending) | {s.action.instance for s in p.steps
                                            if s.phase == "restart"}
    for iid in restart_needed(p):
        pool = ", ".join(f"{pp.target_pages} x {pp.size_kb} kB" for pp in p.report.pools)
        # an instance apply never restarts (a server in a root of its own): the note says how
        how = "run again with --restart or restart it yourself" if iid in restartable \
            else "restart it yourself, as the note above says"
        print(f"restart needed: {iid} takes its huge pages at its next start (the pool holds "
              f"{pool} until then, unused); {how}")
    if result.journal:
        print(f"journal: {result.journal} (undo with `hpadvise rollback {result.journal}`)")
    if result.status in ("ok", "nothing") and req.persist and req.persist_root in ("", "/"):
        print("next boot: " + ("every planned knob comes back as planned (checked)"
                               if not boot else "; ".join(boot)))


def changes_json(ap: ApplyPlan) -> list[dict]:
    """Each change of the plan as `apply --format json` reports it: what, before, after, and
    its status. File contents are shown with secrets replaced."""
    from ..kit.secrets import redact_text

    def plain(action: Action, v: Any) -> Any:
        if isinstance(action, File):  # a whole file (a drop-in too): its text
            text = File.decode(v)
            return None if text is None else redact_text(text)
        if isinstance(v, dict) and "value" in v:
            return v["value"]
        return v
    out = []
    for s in ap.steps:
        if not s.needed and s.status == "planned":
            continue
        a = s.action
        out.append({"target": a.label, "kind": a.kind, "instance": a.instance,
                    "phase": s.phase, "why": s.why,
                    "before": None if a.restart or s.unread else plain(a, s.old),
                    "before_unknown": s.unread,
                    "after": None if a.restart else plain(a, s.new), "status": s.status})
    return out
