"""A/B orchestration for `hpadvise validate`.

Three designs (docs/design.md, "Validating"; measured side by side in lab/README.md):
- restart: every run switches the host and the server into the variant through journaled
  actions (the apply machinery), restarts the server (huge pages are reserved at start; THP
  affects new faults), prewarms, warms up (left out of the figures), then measures. Variants
  run in blocks whose order alternates (ABBA...), so drift cancels. The only design for THP
  variants where nothing runs side by side: they are host-wide.
- resident: one server per variant, all resident at once with the same data (the variants are
  per-server settings). An epoch switches every server into its variant, starts and prewarms
  them, then alternates several short runs among them without restarts; the servers are
  restarted at every epoch so restart-to-restart variation is still sampled.
- simultaneous: as resident, but the servers are measured at the same time, each server and its
  clients pinned to its own CPU, the servers trading CPUs every few seconds within a run and
  the starting CPUs rotating from block to block, so time-varying noise (a VM's
  steal, one vCPU slower than the other for a while) hits every variant alike.
Side by side, THP variants are phases (variants.phase_at): each epoch runs under one THP
setting, the per-server variants side by side in it, so the plan's comparison keeps the
side-by-side precision over the whole budget while THP settings are compared cycle by cycle.
A variant may be named twice (an A/A run: two servers, or two runs per block, of the same
variant); the comparison then measures noise alone. In every design the effect's unit is the
epoch (one restart of every variant; in the restart design an epoch is a block), so the CI
counts restart-to-restart variation. Every knob is put back after each epoch and at the end,
also on Ctrl-C, SIGTERM and failures; scratch servers are removed.

The server under test comes from the engine's plugin (Engine.bench_target, see
benchmarks/target.py) and the benchmark from its declaration (drivers.py): nothing here knows
which engine or benchmark it is. This module is the order of things (side_by_side.py holds
the resident and simultaneous designs' steps); options.py checks the options and picks the
design, budget.py sizes the runs, switching.py makes and undoes each variant's changes, cpus.py
places the servers, measure.py runs the clients, stats.py turns samples into effects.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from dataclasses import asdict, replace
from typing import Callable

from hpadvise.act.face import GIB_KB, pmu_state, Pool, read_choice, SysfsChoice, thp_file
from hpadvise.api.face import InputError, SysRoot

from . import stats
from .cpus import ALL_CPUS, pin_trees
from .drivers import BENCHMARKS, resets
from .fixed import budget_note, calibrate
from .measure import Interrupted, RunOverrun, Sample, State, run_clients
from .own import origins
from .side_by_side import SideBySide
from .design import explained
from .options import Options, check
from .switching import Switcher, ValidateError
from .target import BenchTarget, write_out
from .variants import host_wide, kind, pairs_for

__all__ = ["Options", "Sample", "Validation", "ValidateError", "RunOverrun"]

# What a run stopped by --target-ci says of itself (stats.should_stop: why it covers less).
EARLY_STOP = "--target-ci reached (an interval stopped on its own width covers a little less " \
    "than 95%)"

class Validation(SideBySide):
    def __init__(self, opts: Options, on_update: Callable[[State], None] = lambda s: None):
        self.o = opts
        self.on_update = on_update
        self.state = State(budget_s=opts.duration_s)
        self.samples: list[Sample] = []
        self.interrupted = False
        self.failed: str | None = None  # why the runs ended before the budget (RunOverrun)
        self.target: BenchTarget | None = None
        self.restarted = False
        self.design, self.design_reason = "restart", ""
        self.phases: list[str] = []  # side by side: the THP variants taking turns by epoch
        self.servers: dict[str, tuple[BenchTarget, object]] = {}  # variant -> (server, driver)
        self.made: list[tuple[BenchTarget, object]] = []  # side by side: the target, its copies
        self.twins: list[BenchTarget] = []  # servers made besides the target (removed at end)
        self.skipped: dict[str, str] = {}  # variants that cannot run here, and why
        self.sr = SysRoot("/")
        self.sw = Switcher(opts.db, opts.profile, self.sr, self._update, opts.journal_dir)
        self.meta: dict = {}
        self.pmu = pmu_state()  # "present", or why dTLB counters cannot be had here
        self.buffers_source = ""  # where the scratch server's buffer size came from
        self.commands: dict[str, list[str]] = {}  # variant -> its first benchmark command
        self.calibration: dict | None = None  # a replay's unmeasured first run (fixed.py)

    # ---- checks before anything changes
    def preflight(self) -> None:
        (self.o, self.engine, self.target, self.design, self.design_reason, self.phases,
         self.buffers_source) = check(self.o, self.sr)
        self.sw.take(self.o.survey)
        self.sw.refuse_stacked()

    # ---- the run
    def run(self) -> None:
        self.preflight()
        old_term = signal.signal(signal.SIGTERM, self._on_term)
        try:
            self._setup()
            if self.design == "restart":
                self._loop()
            else:
                self._loop_epochs()
        except (KeyboardInterrupt, Interrupted):
            self.interrupted = True
        except RunOverrun as exc:
            self.failed = self.meta["stopped"] = str(exc)
        except RuntimeError as exc:
            # a benchmark client or a server that failed (pgbench, sysbench, a start): the
            # run cannot go on; said in one line once every knob is back, not as a bug
            raise ValidateError(" ".join(str(exc).split())[:400]) from None
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # restoring must not be cut short
            try:
                self.restore()
            finally:
                signal.signal(signal.SIGTERM, old_term)

    def _on_term(self, signum, frame):
        raise Interrupted()

    def _setup(self) -> None:
        o, t, sw = self.o, self.target, self.sw
        self._update(phase="saving the host's knobs")
        sw.save_baseline()
        t.setup(o, lambda text: self._update(phase=text))
        self.skipped = {**o.dropped, **sw.skips(t, o.variants)}
        self.o = o = replace(o, variants=tuple(v for v in o.variants if v not in self.skipped))
        if len(o.variants) < 2:
            raise InputError("fewer than two variants can run on this server: " + "; ".join(
                f"{v}: {why}" for v, why in self.skipped.items()))
        self.phases = [p for p in self.phases if p in o.variants]
        if not any(map(host_wide, self.phases)):
            self.phases = []  # every THP variant skipped: nothing takes turns
        if self.design != "restart":
            self._hold_pools()
        elif "hugepages-1g" in map(kind, o.variants) and self._room_for_a_held_pool():
            # restarting per run, the 1 GiB pool would be grown again before each 1 GiB run
            # in memory the load and the 4 KiB runs have fragmented: hold it from the start
            if self._reserve(only_kb=GIB_KB) and t.restart_starts:
                t.restart()  # a scratch server may have been stopped to free memory
        o = self.o  # less what the pools could not hold
        b = BENCHMARKS[o.bench]
        self._update(phase=b.loading(o.scale))
        loading = time.time()
        self.bench = t.driver(o.bench, o.scale)
        self.load_s = round(time.time() - loading, 1)
        if o.script:
            # a script that fails here, or whose one transaction outlasts a run's deadline
            # (measure.run_clients), is bad input, said now
            self.bench.trial(o.warm_s + o.run_s + o.run_grace_s)
        if resets(self.bench):  # a replay: its length and errors, before any copy is made
            calibrate(self)
        if self.design != "restart":
            self._make_servers()
        # what the load and the copies left as dirty page cache goes to disk here, in the
        # setup: left to the kernel's flusher it was written out during the first epoch,
        # a kernel thread on the CPUs being measured (236 MB at 128MB of buffers; lab/README.md,
        # "What epoch 1 runs through")
        dirs = [d for d in (s.scratch_dir() for s in (t, *self.twins)) if d]
        if dirs:  # none where validate runs an existing instance
            self._update(phase="writing the servers' files to disk")
        for d in dirs:
            write_out(d)
        if resets(self.bench):
            budget_note(self, len(self.side_by_side), self.phases)
        defrag = read_choice(self.sr.read(thp_file("defrag"), quiet_missing=True) or "").chosen
        o = self.o  # with a replay's timings and notes
        self.meta = {"skipped": self.skipped, "design": self.design,
                     "design_reason": explained(self.design_reason, self.phases,
                                                o.variants),
                     "rounds": o.rounds if self.design != "restart" else None,
                     "swap_s": o.swap_s if self.design == "simultaneous" else None,
                     "thp_defrag": defrag,
                     "plan_thp": dict(o.thp_plan), "profile": o.profile,
                     "shared_buffers": t.buffers, "buffers_setting": t.buffers_setting,
                     "buffers_source": self.buffers_source,
                     "scale": o.scale, "db": o.db, "bench": o.bench, "target": t.label,
                     "workload": o.workload, "workload_about": b.about(o.workload),
                     "clients": o.clients, "default_notes": list(o.default_notes),
                     "run_s": o.run_s, "warm_s": o.warm_s,
                     "variants": list(o.variants), "pairs": pairs_for(o.variants),
                     "phases": self.phases, "side_by_side": self.side_by_side
                     if self.design != "restart" else None,
                     "server_version": t.server(), "server_binary": t.binary,
                     "prewarm_note": t.prewarm_note, "settings_note": t.settings_note,
                     "target_ci_pct": o.target_ci_pct, "band_pct": o.band_pct,
                     "dtlb_counters": self.pmu,
                     **origins(o, t, self.bench), "calibration": self.calibration,
                     "setup_s": round(time.time() - self.state.started, 1),
                     "load_s": self.load_s}
        self.state.started = time.time()  # the budget covers the runs, not the data load

    def _reserve(self, only_kb: int | None = None) -> bool:
        touched, dropped = self.sw.reserve_pools(self.o.variants, self.target, only_kb)
        self.skipped.update(dropped)
        self.o = replace(self.o, variants=tuple(v for v in self.o.variants if v not in dropped))
        return touched

    def _hold_pools(self) -> None:
        """Side by side, before the data is loaded: the pools every huge page variant needs,
        reserved while memory is least fragmented and held for the whole run. The recommended
        variant must not need a host-wide THP change (it would reach every server): then the
        restart design runs. With pools held, the server restarts (huge_pages = try) so that
        the load fills buffers on the held pages instead of 4 KiB memory besides them."""
        o, t = self.o, self.target
        if "recommended" in map(kind, o.variants):
            host = [f"{a.label} = {new}" for a, new in self.sw.steps("recommended", t)
                    if isinstance(a, SysfsChoice) and not a.same(a.get(), new)]
            if host:
                why = f"the recommended plan changes {', '.join(host)} host-wide"
                if o.design != "auto":
                    raise ValidateError(f"--design {o.design}: {why}; use --design restart")
                self.design, self.design_reason, self.phases = "restart", why, []
                return
        if self._reserve():
            t.restart()

    def _done(self, unit_times: list[float]) -> bool:
        """Whether to stop after this epoch: --target-ci reached, or no room for another."""
        if stats.should_stop(list(self.effects().values()), self.o.target_ci_pct,
                             self.o.min_blocks):
            self.meta["stopped"] = EARLY_STOP
            return True
        if self.o.duration_s - self.state.elapsed < max(unit_times):
            self.meta["stopped"] = "time budget used"
            return True
        return False

    # ---- the restart design
    def _loop(self) -> None:
        o = self.o
        block = 0
        block_times: list[float] = []
        while True:
            t0, n0 = time.time(), len(self.samples)
            order = list(o.variants) if block % 2 == 0 else list(reversed(o.variants))
            for v in order:
                self._update(variant=v, block=block + 1)
                try:
                    self.samples.append(self._one(block, v))
                except RunOverrun:
                    del self.samples[n0:]  # only whole blocks count
                    raise
                self._update(last_run=f"block {block + 1} {v}: "
                                      f"{self.samples[-1].tps:,.0f} "
                                      f"{BENCHMARKS[o.bench].rate}")
            block += 1
            block_times.append(time.time() - t0)
            if self._done(block_times):
                return

    def _one(self, block: int, v: str) -> Sample:
        """The restart design's run: switch, restart, prewarm, measure, switch back."""
        t, sw = self.target, self.sw
        self._update(phase="switching")
        sw.current = v
        # a held pool already has this variant's pages (it was sized for them)
        steps = [(a, new) for a, new in sw.steps(v, t)
                 if not (isinstance(a, Pool) and a.size_kb in sw.held_kb)]
        if resets(self.bench):  # a replay's data as before its log
            t.stop()
            t.reset_data()
        sw.apply(steps, t)
        try:
            self.restarted = True
            t.restart()
            self._update(phase="prewarming")
            t.prewarm()
            [sample] = self._measure([(v, t, self.bench, None)], block, block)
        finally:
            sw.unapply()
        return sample

    # ---- measuring
    def _logprefix(self, t: BenchTarget) -> str | None:
        if not BENCHMARKS[self.o.bench].logs:
            return None
        # per-transaction logs, in a directory the server user owns
        logdir = tempfile.mkdtemp(prefix=f"hpadvise-{self.o.bench}-", dir=t.tmpdir)
        shutil.chown(logdir, t.owner)
        return f"{logdir}/{self.o.bench}_log"

    def _measure(self, jobs, block: int, epoch: int, phase: str | None = None
                 ) -> list[Sample]:
        """Run the benchmark on every (variant, server, driver, cpus) of `jobs` at once (one
        job but in the simultaneous design), each server and its clients on its CPUs where
        cpus is given. The clients are shared out among the servers, so the machine carries
        the same load in every design."""
        o = self.o
        clients = max(1, o.clients // len(jobs))
        pin_trees(self.sr, [(t.pid(), cpus) for _, t, _, cpus in jobs if cpus is not None])
        started = time.time()
        try:
            runs, mem, ptes, thp, steal, dtlb, trades, argvs, speeds = run_clients(
                o, self.sr, self.pmu,
                [(drv, self._logprefix(t), cpus) for _, t, drv, cpus in jobs], clients,
                [t.pid() for _, t, _, _ in jobs], self._update)
        except RunOverrun as exc:
            names = " and ".join(v for v, _, _, _ in jobs)
            raise RunOverrun(f"the run of {names} in block {block + 1} {exc}; its clients were "
                             "stopped and the verdict is on the whole epochs before it") from None
        finally:
            pin_trees(self.sr, [(t.pid(), ALL_CPUS) for _, t, _, cpus in jobs
                                if cpus is not None])
        for (v, _, _, _), argv in zip(jobs, argvs):
            self.commands.setdefault(v, argv)  # each variant's client, as it was run
        return [Sample(block, v, run.tps, run.latency_avg_ms, run.p50_ms, run.p95_ms,
                       run.p99_ms, pte if pte is not None else mem.get("page_tables_kb"),
                       mem.get("anon_huge_kb"),
                       mem.get("shmem_huge_kb"), mem.get("hugetlb_kb"), t.backing(), thp,
                       run.progress, round(started, 1), steal, dtlb, epoch,
                       sorted(cpus) if cpus is not None else None, self._server_no(t), traded,
                       phase, mem.get("thp_modes"), run.transactions, run.errors, speed)
                for (v, t, _, cpus), run, pte, traded, speed
                in zip(jobs, runs, ptes, trades, speeds)]

    def _update(self, **kw) -> None:
        for k, v in kw.items():
            setattr(self.state, k, v)
        self.on_update(self.state)

    # ---- results
    def effects(self) -> dict[tuple[str, str], stats.Effect]:
        return stats.comparisons(self.samples, pairs_for(self.o.variants), self.phases,
                                 self.o.band_pct)

    def _how(self, pair: tuple[str, str]) -> dict:
        """How a comparison was measured: its design and its paired unit."""
        if self.phases and any(map(host_wide, pair)):
            return {"design": "THP phases", "unit": "cycle"}
        return {"design": self.design, "unit": "block" if self.design == "restart"
                else "epoch"}

    def restore(self) -> None:
        """Back to exactly how the host was: the variant's journal, then every saved knob,
        then the scratch server is removed."""
        errors = []
        try:
            self.sw.unapply()
        except Exception as exc:
            errors.append(str(exc))
        t = self.target
        if t is not None and t.restarts_instance and self.restarted:
            try:  # back to the settings it ran with, on the pages it had
                t.restart()
            except Exception as exc:
                errors.append(f"restarting {self.o.instance}: {exc}")
        for server in [t, *self.twins]:
            if server is not None:
                try:
                    server.stop()  # release its huge pages before the pools shrink
                except Exception as exc:  # the host's knobs are put back all the same
                    errors.append(f"stopping a scratch server: {exc}")
        errors += self.sw.restore_host()
        for server in [*self.twins, t]:
            if server is not None:
                try:
                    server.destroy()
                except Exception as exc:
                    errors.append(f"removing the scratch data: {exc}")
        self.meta["restore_errors"] = errors

    def result(self) -> dict:
        eff = self.effects()
        knobs = {v: k for v, k in self.sw.knobs.items() if v in self.o.variants}
        pairs = pairs_for(self.o.variants)
        by_phase = stats.by_phase(self.samples, pairs, self.phases, self.o.band_pct)
        thp = stats.phase_samples(self.samples, self.phases)
        return {
            "schema_version": 1,
            "meta": {**self.meta, "variant_knobs": knobs, "interrupted": self.interrupted,
                     "plan_inspections": self.sw.inspections,
                     "bench_commands": self.commands,
                     "elapsed_s": round(self.state.elapsed, 1),
                     "measured_s": round(stats.measured_seconds(
                         self.samples, self.o.warm_s, self.o.run_s), 1)},
            "samples": [asdict(s) for s in self.samples],
            "effects": [{"a": a, "b": b, **asdict(e), "half_width_pct": e.half_width_pct,
                         **self._how((a, b)), "by_phase": by_phase.get((a, b))}
                        for (a, b), e in eff.items()],
            "variants": {v: stats.summary([s for s in (thp if self.phases and host_wide(v)
                                                        else self.samples) if s.variant == v])
                         for v in self.o.variants},
        }
