"""What each apply recorded for the instances it planned: the pages it put in the pools for
them, kept in its journal's header ("pages").

A stopped instance's configuration need not say all that its next start takes: a server
started with options of its own, files edited since. The apply that sized the pool for it
counted it as it was then. So while that apply is active (not rolled back), the plan keeps
at least those pages for the instance when it is stopped (plan._as_recorded), with the reason.
Journals written before applies recorded this have no "pages": they roll back as ever, and
keep nothing.
"""

from __future__ import annotations

import os

from ..api.engines import Engine
from ..kit.errors import InputError
from ..api.model import Demand, Instance, Recorded, Report


def for_header(report: Report, instances: list[Instance]) -> list[dict]:
    """For the journal's header: each instance the plan puts in a pool, with the paths its
    engine names it by (a running server's ID is its port, a stopped one's its directory)
    and its pages per size."""
    out = []
    for inst in instances:
        p = report.placements.get(inst.id)
        if p is None or p.status != "pool":
            continue
        eng = report.engines.get(inst.engine)
        rec = {"instance": inst.id, "engine": inst.engine, "refs": _paths(eng, inst),
               "pages": {str(kb): n for kb, n in p.sizes().items()}}
        if eng is not None and not eng.outlives_process(inst):
            rec["outlives_process"] = False  # its ID names the process (absent skips it)
        out.append(rec)
    return out


def _paths(eng: Engine | None, inst: Instance) -> list[str]:
    return [r for r in (eng.references(inst) if eng is not None else ()) if r.startswith("/")]


def _active(directory: str) -> list[tuple[str, dict]]:
    """(apply ID, record) of every apply not rolled back, the newest first. Nothing where the
    journal cannot be read (not root) or is damaged (rollback and history say so)."""
    from .journal import list_journals
    try:
        journals = list_journals(directory) if os.access(directory, os.R_OK | os.X_OK) else []
    except InputError:
        return []
    return [(j.id, rec) for j in reversed(journals) if j.rolled_back is None
            for rec in (j.header.get("pages") or ()) if isinstance(rec, dict)]


def _pages(rec: dict) -> dict[int, int] | None:
    try:
        pages = {int(k): int(v) for k, v in rec["pages"].items()}
    except (KeyError, AttributeError, TypeError, ValueError):
        return None  # a header edited by hand: it records nothing
    return pages if all(n >= 0 for n in pages.values()) else None


def for_stopped(directory: str, instances: list[Instance], engines: dict[str, Engine]
                ) -> dict[str, Recorded]:
    """For each stopped instance, what the newest active apply that planned it recorded: the
    same instance by ID, or by a path its engine names it by (its data directory)."""
    found = _active(directory)
    out: dict[str, Recorded] = {}
    for inst in instances:
        if inst.running:
            continue
        mine = {os.path.realpath(p) for p in _paths(engines.get(inst.engine), inst)}
        for jid, rec in found:
            refs = rec.get("refs") if isinstance(rec.get("refs"), list) else []
            paths = {os.path.realpath(r) for r in refs if isinstance(r, str)
                     and r.startswith("/")}
            if rec.get("engine") != inst.engine or not (rec.get("instance") == inst.id
                                                        or mine & paths):
                continue
            pages = _pages(rec)
            if pages:  # else a damaged record: an older one may still say
                out[inst.id] = Recorded(jid, str(rec.get("instance")), pages)
                break
    return out


def why(instance: str, apply: str | None, pages: int, configured: int | None) -> str:
    """The reason a stopped instance keeps more pages than its configuration gives."""
    return (f"kept for {instance}: the active apply {apply} recorded {pages} pages; its files "
            f"say {configured}")


def absent(directory: str, instances: list[Instance], engines: dict[str, Engine]
           ) -> list[Instance]:
    """The instances active applies planned that no engine found now (a stopped server its
    engine does not look for when stopped, a MySQL server whose unit or script is not
    running): each a stopped instance found in the journal, whose recorded pages the pool
    keeps for its next start, the newest apply's record first."""
    known = {(i.engine, i.id) for i in instances}
    paths = {(i.engine, os.path.realpath(p)) for i in instances
             for p in _paths(engines.get(i.engine), i)}
    out: list[Instance] = []
    for jid, rec in _active(directory):
        engine, iid = rec.get("engine"), rec.get("instance")
        refs = rec.get("refs") if isinstance(rec.get("refs"), list) else []
        # the same server found under another ID: the same data directory (a socket's path
        # is no server's own: a server in a root of its own may name the host's socket path)
        if not isinstance(engine, str) or not isinstance(iid, str) or (engine, iid) in known \
                or any((engine, os.path.realpath(r)) in paths for r in refs
                       if isinstance(r, str) and r.startswith("/") and os.path.isdir(r)):
            continue
        pages = _pages(rec)
        if not pages or engine not in engines or rec.get("outlives_process") is False:
            continue  # an ID that named a process: that server is gone, not stopped
        known.add((engine, iid))
        kb = max(pages)  # its largest page size; `split` holds every size it recorded
        inst = Instance(engine, iid, f"{iid} (not running; the active apply {jid} planned it)",
                        running=False, found=f"the active apply {jid}")
        inst.demand = Demand(iid, None, kb, {kb: pages[kb]}, True,
                             f"recorded by the active apply {jid}",
                             split=pages if len(pages) > 1 else None)
        out.append(inst)
    return out


def process_modes(directory: str) -> dict[tuple[int, float], str]:
    """(pid, start time) -> THP mode of each server an apply not rolled back started in a mode
    of its own (process_thp.ProcessThp records the process it started): what its /proc cannot
    tell (a PostgreSQL postmaster has no private memory of a PMD's size, the only place the
    advised-only mode shows), as long as that very process runs. Nothing where the journal
    cannot be read."""
    from .journal import list_journals
    if not os.access(directory, os.R_OK | os.X_OK):
        return {}
    try:
        journals = list_journals(directory)
    except InputError:  # a damaged journal: rollback and history say so
        return {}
    out = {}
    for j in journals:
        for e in j.entries if j.rolled_back is None else ():
            a = e.actual
            if e.spec.get("kind") == "process_thp" and e.done and isinstance(a, dict) \
                    and a.get("pid") and a.get("started") is not None:
                out[(a["pid"], a["started"])] = a.get("mode")
    return out
