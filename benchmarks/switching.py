"""Switching: what each variant changes for one server (as `apply` would make it), made
through journaled actions and undone the same way; the host's knobs saved before anything
changes and put back at the end; pools held for the whole run.

The recommended variant's steps are apply's plan for the server (survey, select, plan_of,
prepare), made once per server from validate's one survey of the host, taken before anything
changed (options.see): each server validate starts joins that survey (pipeline.joined), and
the host is not read again, so that the pools validate holds and its THP phases never enter
the plan.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Callable

from hpadvise.act.face import (Action, Compact, GIB_KB, HUGEPAGES_DIR, joined, journal as jr,
                               plan_of, Pool, pool_dir, refuse_stacked, ScratchDir, select,
                               size_of_dir, survey, SysfsChoice, Sysctl, THP_FILES,
                               thp_file)
from hpadvise.api.face import InputError, SysRoot, Targets

from .target import ON_SCRATCH, BenchTarget, scratch_path
from .variants import THP_SWITCH, kind


class ValidateError(Exception):
    """validate could not go on (not bad input): one line for the user, everything restored."""


class Switcher:
    def __init__(self, db: str, profile: str, sr: SysRoot,
                 update: Callable[..., None] = lambda **kw: None,
                 journal_dir: str | None = None):
        self.db, self.profile, self.sr, self.update = db, profile, sr, update
        self.journal_dir = jr.journal_dir(journal_dir)
        # validate's own journal among apply's: what the host and the instance had before
        # anything changed, so that a validate killed (SIGKILL, a power cut) leaves what
        # `hpadvise rollback` restores, and a later capture, apply or validate is refused
        # instead of taking its values for the originals (stacked.py)
        self.ledger: jr.Journal | None = None
        self._ledgered: set[str] = set()  # identities of the actions it holds
        self._restarts: dict[str, Action | None] = {}  # an instance's restart, from its plan
        self.jdir: str | None = None  # the variants' journals, made when the run starts
        self.active: list[jr.Journal] = []  # the variants switched on now, in order
        self.reserved: list[jr.Journal] = []  # pools held for the whole run
        self.baseline: list[tuple[Action, object]] = []
        self.held_kb: set[int] = set()  # page sizes whose pool is held for the whole run
        self.knobs: dict[str, list[str]] = {}  # variant -> what it set ("label = value")
        self.current = ""  # the variant being switched to
        self.seen = None  # validate's survey of the host (options.see), with its servers
        self.inspections = 0  # how often the host was surveyed for a plan
        self._plans: dict[str, tuple[list[tuple[Action, object]], int]] = {}  # by server

    # ---- the host before and after
    def host_knobs(self) -> list[Action]:
        """Every knob validate may change on the host: each pool, the THP knobs."""
        sizes = [size_of_dir(d) for d in sorted(os.listdir(HUGEPAGES_DIR))]
        return [Pool(kb) for kb in sizes if kb is not None] \
            + [SysfsChoice(thp_file(k)) for k in THP_FILES]

    def refuse_stacked(self) -> None:
        """Before anything changes: refused in one line while a killed capture or validate
        holds one of the host's knobs (stacked.py)."""
        if os.access(self.journal_dir, os.R_OK | os.X_OK):
            refuse_stacked(self.journal_dir, self.host_knobs(), "validate")

    def save_baseline(self) -> None:
        self.baseline = [(a, a.get()) for a in self.host_knobs()]
        jr.open_dir(self.journal_dir)
        with jr.Lock(self.journal_dir):
            refuse_stacked(self.journal_dir, [a for a, _ in self.baseline], "validate")
            self.ledger = jr.Journal.create(self.journal_dir, {"argv": sys.argv[1:],
                                                               "command": "validate"})
        for a, old in self.baseline:
            self._ledger(a, old)
        jdir = scratch_path("hpadvise-validate-journal-")
        self._ledger(ScratchDir(jdir), None)
        os.mkdir(jdir, 0o700)
        self.jdir = jdir
        ON_SCRATCH.append(self._scratch)

    def _scratch(self, path: str, pidfile: str, stop: str) -> None:
        """A scratch server's directory, just made: in the ledger (scratch.py)."""
        self._ledger(ScratchDir(path, pidfile, stop), None)

    def _ledger(self, action: Action, old: object) -> None:
        """`action`'s value before validate first changed it, in the ledger (once)."""
        if self.ledger is not None and action.identity() not in self._ledgered:
            self._ledgered.add(action.identity())
            self.ledger.done(self.ledger.intent(action, old, old), old)

    def restore_host(self) -> list[str]:
        """The held pools' journals back, then every saved knob; the errors, if any."""
        if self._scratch in ON_SCRATCH:
            ON_SCRATCH.remove(self._scratch)
        errors = []
        for j in reversed(self.reserved):
            try:
                jr.rollback(j)
                j.mark_rolled_back([])
            except Exception as exc:
                errors.append(str(exc))
        for action, old in reversed(self.baseline):
            try:
                if action.get() != old:
                    action.set(old)
            except Exception as exc:
                errors.append(f"{action.label}: {exc}")
        if self.jdir:
            shutil.rmtree(self.jdir, ignore_errors=True)
        if self.ledger is not None:
            if errors:  # left active: a rollback may finish what this could not
                errors.append(f"`hpadvise rollback {self.ledger.id}` puts back what it can "
                              "once the cause is gone")
            else:
                self.ledger.finish("validate", "the host's knobs put back")
                self.ledger.mark_rolled_back([])
        return errors

    # ---- what a variant changes
    def steps(self, v: str, t: BenchTarget) -> list[tuple[Action, object]]:
        """What variant v changes, for server t."""
        v = kind(v)
        if v == "current":
            return []
        if v in THP_SWITCH:
            knob, value = THP_SWITCH[v]
            return [(SysfsChoice(thp_file(knob)), value)]
        if v == "hugepages-off":
            return t.hugepages_off()
        if v == "hugepages-1g":
            pool = Pool(GIB_KB)
            return [(pool, pool.get() + self._plan(t)[1])] + list(t.page_size_steps(GIB_KB))
        return self._plan(t)[0]  # recommended: the plan for this server, as apply makes it

    def take(self, seen) -> None:
        """The survey of the host validate took before anything changed (options.see): its
        servers are planned from it."""
        self.seen, self.inspections = seen, self.inspections + 1

    def _instance(self, ref: str):
        """Server `ref` in validate's survey: one it started since joins it first."""
        if self.seen is None:  # no survey handed over: one of its own, once
            self.inspections += 1
            self.seen = survey(self.sr, self.profile, Targets(), None, scratch=True,
                               journal=self.journal_dir)
        try:
            return select(self.seen, [self.db], [ref])[0]
        except InputError:  # a server started since the survey (its own, the copies)
            self.seen = joined(self.seen, self.db, self.journal_dir)
            return select(self.seen, [self.db], [ref])[0]

    def _plan(self, t: BenchTarget) -> tuple[list[tuple[Action, object]], int]:
        """The recommended steps for server t and its demand in 1 GiB pages: apply's plan
        for it (select, plan_of, prepare), made once."""
        from hpadvise.act.face import prepare
        key = t.instance_ref
        if key in self._plans:
            return self._plans[key]
        inst = self._instance(key)
        report = plan_of(self.seen, [inst])
        plan = prepare(report, report.engines, restart=False, persist=False)
        if t.restarts_instance and (ra := report.engines[inst.engine].restart_action(inst)):
            self._restarts[key] = ra
        # the kernel's sysctls are the host's, not a variant's: validate leaves them as found
        steps = [(s.action, s.new) for s in plan.steps if s.phase in ("runtime", "engine")
                 and not isinstance(s.action, Sysctl)]
        gig = inst.demand.pages.get(GIB_KB, 0) if inst.demand else 0
        self._plans[key] = (steps, gig)
        return steps, gig

    def _restart_of(self, t: BenchTarget) -> Action | None:
        """The instance's restart as apply makes it (from its plan, made once)."""
        if t.instance_ref not in self._restarts:
            try:
                self._plan(t)
            except Exception:  # no plan, no restart to journal: rollback then says so
                pass
            self._restarts.setdefault(t.instance_ref, None)
        return self._restarts[t.instance_ref]

    def skips(self, t: BenchTarget, variants: list[str]) -> dict[str, str]:
        """Variants that cannot change anything for this server, and why."""
        import re
        out: dict[str, str] = {}
        pid = t.pid()
        status = self.sr.read(f"/proc/{pid}/status", quiet_missing=True) if pid else None
        if status and re.search(r"^THP_enabled:\s*0", status, re.M):
            for v in THP_SWITCH:
                out[v] = ("the server turned THP off for itself (prctl PR_SET_THP_DISABLE; "
                          f"/proc/{pid}/status THP_enabled: 0): THP knobs cannot reach it")
        if "hugepages-1g" in map(kind, variants):
            why = t.page_size_steps(GIB_KB)
            if isinstance(why, str):
                out["hugepages-1g"] = why
            elif not self.sr.exists(pool_dir(GIB_KB)):
                out["hugepages-1g"] = "this host has no 1 GiB pages"
        return {v: out[kind(v)] for v in variants if kind(v) in out}

    # ---- switching
    def apply(self, steps: list[tuple[Action, object]], t: BenchTarget) -> None:
        """Switch into the variant being applied (self.current) on server t."""
        # a directory per switch: journals are named by the second they start in
        j = jr.Journal.create(tempfile.mkdtemp(dir=self.jdir), {"argv": ["validate"]})
        self.active.append(j)
        knobs = self.knobs.setdefault(self.current, [])
        for action, new in steps:
            shown = new.get("value") if isinstance(new, dict) else new
            if f"{action.label} = {shown}" not in knobs:
                knobs.append(f"{action.label} = {shown}")
            old = action.get()
            if action.same(old, new):
                continue
            if t.restarts_instance and not isinstance(action, (Pool, SysfsChoice, Compact)):
                # the instance's own settings, and its restart: a rollback of a killed
                # validate puts them back and restarts it on them
                self._ledger(action, old)
                if (ra := self._restart_of(t)) is not None:
                    self._ledger(ra, None)
            e = j.intent(action, old, new)
            action.set(new)
            ok, actual = action.verify(new)
            if not ok and isinstance(action, Pool) and t.restart_starts:
                # the scratch server's own 4 KiB shared memory may be what fragments RAM: stop
                # it (the variant's restart starts it again) and ask once more
                # (compaction skips pages under writeback, mm/migrate.c: write them back
                # first; cheap, though the 1 GiB shortfalls seen here did not yield to it)
                self.update(phase="stopping the server to free memory for the pool")
                t.stop()
                os.sync()
                Compact().set(True)
                action.set(new)
                ok, actual = action.verify(new)
            j.done(e, actual)
            if not ok and isinstance(action, Pool):
                stopped = " even with the scratch server stopped" \
                    if t.restart_starts else ""
                raise ValidateError(f"the kernel granted {actual} of {new} pages for "
                                    f"{action.label}{stopped}; free memory, lower "
                                    "--shared-buffers or reserve the pages at boot")

    def unapply(self) -> None:
        while self.active:
            j = self.active[-1]
            jr.rollback(j)
            j.mark_rolled_back([])
            self.active.pop()

    def reserve_pools(self, variants: list[str], t: BenchTarget, only_kb: int | None = None
                      ) -> tuple[bool, dict[str, str]]:
        """Side by side, the pools for every huge page variant are reserved once, before the
        data is loaded and copied, and held until validate ends: at 8 GB the kernel granted
        only 4140-4152 of 4242 2 MiB pages once two copies had been made, and 2 of 9 1 GiB
        pages after the load alone (23 GB free, but unmovable pages left all over memory by
        the load), even with every server stopped. Each variant's pool need is what its plan
        adds to the pool as it is now (for this server alone); needs of the same page size
        add up.

        The largest page size is reserved first: a 1 GiB page needs a whole free, aligned
        1 GiB block, and thousands of 2 MiB pages taken first land all over memory
        (Documentation/admin-guide/mm/hugetlbpage.rst: gigantic pages are best reserved as
        early as possible). A 1 GiB pool that still cannot be had drops only the
        hugepages-1g variant, with the kernel's answer as the reason, when two variants
        remain. only_kb: that page size alone (the restart design holds the 1 GiB pool).
        Returns whether pools were touched (the server may have been stopped to free memory
        for them) and the variants dropped, with why."""
        need: dict[int, tuple[Pool, int, list[str]]] = {}
        for v in variants:
            for a, new in self.steps(v, t):
                if isinstance(a, Pool) and only_kb in (None, a.size_kb):
                    pool, have, users = need.get(a.size_kb, (a, a.get(), []))
                    need[a.size_kb] = (pool, have + max(0, new - a.get()), users + [v])
        dropped: dict[str, str] = {}
        if not need:
            return False, dropped
        self.update(phase="reserving the huge page pools for the whole run")
        self.current = "pools held for the whole run"
        for size in sorted(need, reverse=True):
            pool, n, users = need[size]
            try:
                self.apply([(Compact(), True), (pool, n)], t)
            except ValidateError as exc:
                if {kind(u) for u in users} != {"hugepages-1g"} \
                        or len(variants) - len(dropped) - len(users) < 2:
                    raise
                self.unapply()  # this pool's journal only: the held ones are set aside
                dropped.update({u: str(exc) for u in users})
                self.update(phase=f"skipping hugepages-1g: {exc}")
                continue
            self.reserved.append(self.active.pop())  # rolled back by restore_host()
            self.held_kb.add(size)
            for v in users:  # named among each user's knobs
                self.knobs.setdefault(v, []).append(
                    f"{pool.label} = {n} (held for the whole run)")
        return True, dropped
