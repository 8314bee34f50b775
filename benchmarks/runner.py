"""A/B orchestration for `hpadvise validate`.

Three designs (docs/design.md, "Validating"; measured side by side in benchmarks/README.md):
- restart: every run switches the host and the server into the variant through journaled
  actions (the apply machinery), restarts the server (huge pages are reserved at start; THP
  affects new faults), prewarms, warms up (left out of the figures), then measures. Variants
  run in blocks whose order alternates (ABBA...), so drift cancels. The only design for THP
  variants: they are host-wide.
- resident: one server per variant, all resident at once with the same data (the variants are
  per-server settings). An epoch switches every server into its variant, starts and prewarms
  them, then alternates several short runs among them without restarts; the servers are
  restarted at every epoch so restart-to-restart variation is still sampled.
- simultaneous: as resident, but the servers are measured at the same time, each server and its
  clients pinned to its own CPU, the servers trading CPUs every few seconds within a run and
  the starting CPUs rotating between the rounds of an epoch, so time-varying noise (a VM's
  steal, one vCPU slower than the other for a while) hits every variant alike.
A variant may be named twice (an A/A run: two servers, or two runs per block, of the same
variant); the comparison then measures noise alone. In every design the effect's unit is the
epoch (one restart of every variant; in the restart design an epoch is a block), so the CI
counts restart-to-restart variation. Every knob is put back after each epoch and at the end,
also on Ctrl-C, SIGTERM and failures; scratch servers are removed.

The server under test comes from the engine's plugin (Engine.bench_target, see
benchmarks/target.py): nothing here knows which engine it is.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from hpadvise import journal as jr
from hpadvise.actions import Action, Compact, Pool, SysfsChoice
from hpadvise.errors import InputError
from hpadvise.host import read_cpu_times, read_meminfo, read_vmstat
from hpadvise.probe import dtlb_events, parse_perf_csv, pmu_state
from hpadvise.procs import Proc, ProcTable
from hpadvise.sysroot import SysRoot

from . import stats
from .target import BenchTarget

THP = "/sys/kernel/mm/transparent_hugepage"
GIB_KB = 1048576
# What each variant changes (and nothing else):
#   current        nothing: the host and server as they are
#   recommended    the plan, as `apply` would make it (runtime and the server's settings)
#   thp-always     THP `enabled` = always: private anonymous memory (defrag as the host has it)
#   thp-never      THP `enabled` = never
#   thp-shmem      THP `shmem_enabled` = always: shared memory, PostgreSQL's buffers among it
#   hugepages-off  the server's own huge page setting off
#   hugepages-1g   the server on 1 GiB static pages (an engine that can choose its page size)
# A variant named twice runs twice, as "name" and "name#2" (labels_for): an A/A run, whose
# effect measures the noise of the host and the design, since nothing differs.
# THP `enabled` does not reach shared memory, `shmem_enabled` does (transhuge.rst): the split
# is what a DBA means by "THP on" versus the shared-memory THP that helps PostgreSQL.
VARIANTS = ("current", "recommended", "thp-always", "thp-never", "thp-shmem", "hugepages-off",
            "hugepages-1g")
# Variants that are settings of the server alone (plus pool pages for it): they can run side by
# side on servers that are resident at once. THP variants change host-wide knobs.
PER_SERVER = ("current", "recommended", "hugepages-off", "hugepages-1g")
DESIGNS = ("auto", "restart", "resident", "simultaneous")
# What "auto" picks where the variants allow it: the design with the narrowest CI in the
# side-by-side series in benchmarks/README.md ("Designs of a validate run").
AUTO_DESIGN = "simultaneous"
# What a run stopped by --target-ci says of itself (stats.should_stop: why it covers less).
EARLY_STOP = "--target-ci reached (an interval stopped on its own width covers a little less " \
    "than 95%)"
# The scratch server's buffers when neither --shared-buffers nor a running instance says.
DEFAULT_BUFFERS = "1GB"
DEFAULT_VARIANTS = ("current", "recommended", "thp-never", "thp-always")
# Comparisons (A, B): the effect reported is B over A.
PAIRS = (("current", "recommended"), ("thp-never", "thp-always"), ("current", "thp-shmem"),
         ("current", "hugepages-off"), ("recommended", "hugepages-1g"))
# pgbench scale 1 is ~15 MiB of tables and indexes (scale 400 measured ~6 GB, docs/reference.md).
MB_PER_SCALE = 15
# One TPC-C warehouse with its share of ITEM is ~100 MiB loaded (TPC-C 5.11 clause 4.2.2 puts
# it near 70 MiB of rows; measured here with indexes: ~95 MiB on MariaDB and PostgreSQL).
MB_PER_WAREHOUSE = 100


class ValidateError(Exception):
    """validate could not go on (not bad input): one line for the user, everything restored."""


class RunOverrun(Exception):
    """A benchmark run did not end in its time (warm-up + run + Options.run_grace_s): its
    clients are stopped and validate ends with what the runs before it measured."""


def parse_duration(text: str) -> int:
    mt = re.fullmatch(r"\s*(\d+)\s*(s|m|h)?\s*", text or "")
    if not mt:
        raise InputError(f"duration {text!r} is not a duration; write it like 90s, 10m or 1h")
    seconds = int(mt.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[mt.group(2)]
    if seconds < 1:
        raise InputError(f"duration {text!r} is no time at all; give at least 1s (e.g. 10m)")
    return seconds


def kind(label: str) -> str:
    """The variant a label runs: "current#2" is a second server of "current" (an A/A run)."""
    return label.split("#", 1)[0]


def labels_for(names: list[str]) -> list[str]:
    """Unique labels for the variants asked for, in order: a variant named again becomes
    "name#2", "name#3", ..., a second server of the same variant. Comparing a variant with
    itself (an A/A run) measures the host's own noise: its effect should be 0."""
    out: list[str] = []
    for v in names:
        label, k = v, 2
        while label in out:
            label, k = f"{kind(v)}#{k}", k + 1
        out.append(label)
    return out


def pairs_for(variants: list[str]) -> list[tuple[str, str]]:
    out = [p for p in PAIRS if p[0] in variants and p[1] in variants]
    # every repeat against the first server of its variant (A/A)
    out += [(next(u for u in variants if kind(u) == kind(v)), v)
            for v in variants if kind(v) != v]
    if not out and len(variants) >= 2:
        out = [(variants[0], variants[1])]
    return out


@dataclass
class Options:
    variants: list[str]
    duration_s: int
    db: str  # the engine (its plugin provides the server under test)
    bench: str = "pgbench"  # pgbench | tpcc
    workload: str = "select"  # select | tpcb
    clients: int = 16
    scale: int | None = None
    run_s: int | None = None
    warm_s: int | None = None
    target_ci_pct: float | None = None  # None: use the whole budget (see stats.should_stop)
    band_pct: float = 1.0
    shared_buffers: str | None = None  # None: follow the host's instance of the engine
    max_connections: int = 100
    profile: str = "oltp"
    min_blocks: int = 3
    instance: str | None = None  # benchmark this running instance instead of a scratch one
    allow_restart: bool = False
    design: str = "auto"  # one of DESIGNS
    rounds: int | None = None  # runs of every variant per epoch (resident, simultaneous)
    # simultaneous: the servers trade CPUs every swap_s seconds within a run as well (0: each
    # keeps its CPUs for the whole run); None: the default (see preflight)
    swap_s: float | None = None
    # how long a run may go on past its warm-up and measured seconds before its clients are
    # stopped: pgbench -T and sysbench --time end the clients on their own clock, so beyond
    # them only connecting and the final report remain (seconds); a run still going a
    # minute later is one whose server stopped making progress
    run_grace_s: int = 60


@dataclass
class Sample:
    block: int
    variant: str
    tps: float
    latency_avg_ms: float | None
    p50_ms: float
    p95_ms: float
    p99_ms: float
    page_tables_kb: int | None  # the server's own (VmPTE summed; PageTables if unreadable)
    anon_huge_kb: int | None
    shmem_huge_kb: int | None
    hugetlb_kb: int | None
    backing: str | None
    thp_deltas: dict[str, int]
    progress: list = field(default_factory=list)
    started: float | None = None     # epoch seconds when the benchmark started (warm-up incl.)
    steal_pct: float | None = None   # CPU steal during the measured part (VMs; /proc/stat)
    dtlb: dict | None = None  # perf stat's dTLB counters over the measured part (a PMU only)
    epoch: int | None = None  # the servers' start this run belongs to (= block when restarting)
    cpus: list[int] | None = None  # CPUs the server and its clients were pinned to
    server: int | None = None  # side by side: 0 the server the data was loaded into, 1.. copies
    # simultaneous: the CPU trades within the run (warm-up included) that took, read back off
    # the server's main process and its driver
    trades: int | None = None


@dataclass
class State:
    """What the live display shows."""
    phase: str = "starting"
    variant: str = ""
    block: int = 0
    started: float = field(default_factory=time.time)
    budget_s: int = 0
    live_tps: float | None = None
    last_run: str = ""   # the latest finished run, for plain progress lines

    @property
    def elapsed(self) -> float:
        return time.time() - self.started


class Interrupted(Exception):
    pass


def _meminfo(sr: SysRoot) -> dict[str, int | None]:
    m = read_meminfo(sr)
    return {"page_tables_kb": m.page_tables_kb, "anon_huge_kb": m.anon_huge_kb,
            "shmem_huge_kb": m.shmem_huge_kb, "hugetlb_kb": m.hugetlb_kb}


def _server_page_tables_kb(sr: SysRoot, pids: list[int | None]) -> list[int | None]:
    """Each server's own page tables: VmPTE (Documentation/filesystems/proc.rst) summed over its
    main process and its children, as check counts an instance's. PageTables in /proc/meminfo
    is host-wide and cannot tell apart servers measured at the same time."""
    table = ProcTable(sr)
    out: list[int | None] = []
    for pid in pids:
        ptes = [p.vm_pte_kb for p in [Proc(sr, pid), *table.children(pid)]] if pid else []
        ptes = [kb for kb in ptes if kb is not None]
        out.append(sum(ptes) if ptes else None)
    return out


def _steal_pct(before: dict | None, after: dict | None) -> float | None:
    """Share of CPU time the hypervisor gave to others between two /proc/stat readings: a run
    with much steal measured the neighbours as much as the variant."""
    if not before or not after:
        return None
    total = sum(after.values()) - sum(before.values())
    return round(100 * (after["steal"] - before["steal"]) / total, 1) if total > 0 else None


def _thp_counters(sr: SysRoot) -> dict[str, int]:
    return {k: v for k, v in read_vmstat(sr).items() if k.startswith("thp_")}


_ALL_CPUS = sorted(os.sched_getaffinity(0))


def _cpu_groups(n: int) -> list[list[int]]:
    """The CPUs we may use, split into n groups of equal size (the rest unused)."""
    each = max(1, len(_ALL_CPUS) // max(1, n))
    return [_ALL_CPUS[i * each:(i + 1) * each] for i in range(n)]


def _pin_trees(sr: SysRoot, pins: list[tuple[int | None, object]]) -> None:
    """Pin servers, (pid, cpus) each: every thread of its main process and of its children
    (sched_setaffinity(2) is per thread; processes forked later, like PostgreSQL's backends,
    inherit the mask). One read of the process table serves every server."""
    table = ProcTable(sr)
    for pid, cpus in pins:
        if not pid:
            continue
        for p in [pid] + [c.pid for c in table.children(pid)]:
            try:
                tids = os.listdir(f"/proc/{p}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    os.sched_setaffinity(int(tid), cpus)
                except OSError:  # a thread that just ended
                    pass


def _start_pinned(start: Callable[[], subprocess.Popen], cpus) -> subprocess.Popen:
    """Start a driver on `cpus` (None: anywhere): the child inherits our mask at fork, so no
    thread of it ever runs elsewhere; our own mask is put back at once."""
    if cpus is None:
        return start()
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        return start()
    finally:
        os.sched_setaffinity(0, old)


def _turn(now: float, warm_s: float, swap_s: float) -> int:
    """How many times the servers have traded CPUs `now` seconds into a run that swaps every
    swap_s seconds: on a grid through the end of the warm-up, so that the measured part is cut
    into whole swap_s pieces and each server spends an equal share of it on every CPU group
    when it holds a multiple of (servers) pieces."""
    first = warm_s % swap_s or swap_s
    return 0 if now < first else int((now - first) // swap_s) + 1


def _kill_all(procs: list[subprocess.Popen], wait_s: float = 10) -> None:
    """Every client's process group ended: SIGTERM, and SIGKILL where it has not ended within
    wait_s (a client stopped with SIGSTOP held SIGTERM pending here, one that ignores it
    stays; SIGKILL ends both)."""
    def signal_group(p: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
    for p in procs:
        signal_group(p, signal.SIGTERM)
        try:
            p.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            signal_group(p, signal.SIGKILL)
            p.wait()


class Validation:
    def __init__(self, opts: Options, on_update: Callable[[State], None] = lambda s: None):
        self.o = opts
        self.on_update = on_update
        self.state = State(budget_s=opts.duration_s)
        self.samples: list[Sample] = []
        self.interrupted = False
        self.failed: str | None = None  # why the runs ended before the budget (RunOverrun)
        self.target: BenchTarget | None = None
        self.restarted = False
        self.jdir: str | None = None  # the variants' journals, made when the run starts
        self.active: list[jr.Journal] = []  # the variants switched on now, in order
        self.design, self.design_reason = "restart", ""
        self.servers: dict[str, tuple[BenchTarget, object]] = {}  # variant -> (server, driver)
        self.made: list[tuple[BenchTarget, object]] = []  # side by side: the target, its copies
        self.twins: list[BenchTarget] = []  # servers made besides the target (removed at end)
        self.reserved: list[jr.Journal] = []  # pools held for a side-by-side run
        self.skipped: dict[str, str] = {}  # variants that cannot run here, and why
        self.held_kb: set[int] = set()  # page sizes whose pool is held for the whole run
        self.held_knobs: dict[str, list[str]] = {}  # variant -> the held pools it uses
        self.baseline: list[tuple[Action, object]] = []
        self.sr = SysRoot("/")
        self.meta: dict = {}
        self.pmu = pmu_state()  # "present", or why dTLB counters cannot be had here
        self._current = ""  # the variant being applied
        self.buffers_source = ""  # where the scratch server's buffer size came from

    # ---- checks before anything changes
    def preflight(self) -> None:
        o = self.o
        o.variants = labels_for(o.variants)
        bad = [v for v in o.variants if kind(v) not in VARIANTS]
        if bad:
            raise InputError(f"unknown variant {bad[0]!r}; choose from {', '.join(VARIANTS)}")
        if len(o.variants) < 2:
            raise InputError("give at least two variants to compare")
        from hpadvise.engines import registry
        self.engine = registry.get(o.db)
        if not self.engine.benches:
            raise InputError(f"validate does not support engine {o.db}; engines with "
                             "benchmarks: " + ", ".join(
                                 e.name for e in registry.all() if e.benches))
        if o.bench not in self.engine.benches:
            raise InputError(f"--bench {o.bench} does not run on --db {o.db}; use "
                             f"{' or '.join(self.engine.benches)}")
        if o.bench == "pgbench" and o.workload not in ("select", "tpcb"):
            raise InputError(f"unknown workload {o.workload!r}; use tpcb or select")
        if os.geteuid() != 0:
            raise InputError("validate switches huge pages and THP and needs root; run it with "
                             "sudo")
        if o.bench == "tpcc" and shutil.which("sysbench") is None:
            raise InputError("sysbench not found; install it (Debian: apt-get install sysbench)")
        from hpadvise.sizing import parse_bytes
        given = o.shared_buffers is not None
        o.shared_buffers = o.shared_buffers or DEFAULT_BUFFERS
        parse_bytes(o.shared_buffers, "--shared-buffers")
        self.target = self.engine.bench_target(o)  # checks only: binaries, the instance
        if given or o.instance:
            self.buffers_source = "given" if given else "the instance's own"
        else:
            o.shared_buffers, self.buffers_source = self._default_buffers()
            self.target.buffers = o.shared_buffers
        sb = self.target.buffers_bytes()
        per_mb = MB_PER_WAREHOUSE if o.bench == "tpcc" else MB_PER_SCALE
        if o.scale is None:
            o.scale = max(1, int(sb * 0.75 / (per_mb << 20)))  # the data fits in the buffers
        if o.scale < 1:
            raise InputError(f"--scale {o.scale}: give at least 1")
        if o.clients < 1:
            raise InputError(f"--clients {o.clients}: give at least 1")
        if o.run_s is not None and o.run_s < 1:
            raise InputError(f"--run-seconds {o.run_s}: a run needs at least 1 second")
        if o.warm_s is not None and o.warm_s < 0:
            raise InputError(f"--warmup-seconds {o.warm_s}: give 0 or more")
        need = o.scale * per_mb * 2 << 20  # tables, indexes and WAL
        free = shutil.disk_usage(tempfile.gettempdir()).free
        if need > free:
            raise InputError(f"scale {o.scale} needs ~{need >> 30} GiB of disk in "
                             f"{tempfile.gettempdir()}, only {free >> 30} GiB free; lower --scale")
        if o.warm_s is None:
            # With 4 KiB pages every backend faults the shared buffers into its own page tables
            # as its reads reach them: at shared_buffers=8GB, 16 clients, TPS started at 50-60%
            # and was at ~90% of the run's mean after 10 s, the rest of the ramp lasting tens of
            # seconds (benchmarks/README.md). ~1 s per GiB of buffers, 3..20 s.
            o.warm_s = max(3, min(20, round(3 + sb / (1 << 30))))
        self.design, self.design_reason = self._choose_design(sb)
        n = len(o.variants)
        if o.rounds is None:
            # simultaneous: every server once on every CPU group per epoch (the CPUs' own
            # differences cancel within an epoch); resident: two rounds, ABBA within the epoch
            o.rounds = n if self.design == "simultaneous" else 2
        if o.rounds < 1:
            raise InputError(f"--rounds {o.rounds}: give at least 1")
        if o.swap_s is not None and o.swap_s < 0:
            raise InputError(f"--swap-seconds {o.swap_s}: give 0 (no swapping within a run) "
                             "or more")
        if o.run_s is None:
            # 30 s measured: shorter windows were dominated by this VM's few-second dips (sd of
            # the block ln-ratio 0.06-0.07 at 10-20 s, 0.05 at 25-30 s; benchmarks/README.md).
            # Shortened when the budget cannot otherwise hold min_blocks epochs, with ~12 s of
            # restart and prewarm per server start.
            epoch = o.duration_s / o.min_blocks
            if self.design == "restart":
                per = epoch / n - 12 - o.warm_s
            else:
                runs = o.rounds * (1 if self.design == "simultaneous" else n)
                per = (epoch - 12 * n) / runs - o.warm_s
            o.run_s = max(3, min(30, int(per)))
        if o.swap_s is None:
            # Simultaneous: pinned for a whole run, a run's ln ratio carried a level of its own
            # (sd ~0.06 between the rounds of one epoch, not the CPUs' lasting difference and
            # not the servers'), two thirds of an A/A's epoch variance; trading CPUs every
            # ~3 s within the run cut it to 0.007-0.019, twice what per-second noise predicts
            # at most (benchmarks/README.md, "Trading CPUs within a run"). Pieces of
            # ~3 s: the per-second ratio's autocorrelation is gone after 2-3 s, and a trade
            # moves every thread of a server and its clients. The run is cut into a multiple
            # of n pieces, so each server spends equal time on every CPU group.
            pieces = n * max(1, round(o.run_s / (3 * n)))
            o.swap_s = o.run_s / pieces if self.design == "simultaneous" else 0

    def _default_buffers(self) -> tuple[str, str]:
        """The scratch server's buffers when none are given: those of the largest running
        instance of the engine on this host (what the user will run), capped so that the
        host keeps room for a second copy or a pool of the same size and 2 GiB besides."""
        from hpadvise.engines import Targets
        from hpadvise.plan import inspect
        from hpadvise.sizing import fmt_bytes, parse_bytes
        setting = self.target.buffers_setting
        found = []
        for i in inspect(self.sr, self.o.profile, Targets(), [self.o.db]).instances:
            if i.running and i.engine == self.o.db and i.settings.get(setting):
                try:
                    found.append((parse_bytes(str(i.settings[setting]), setting), i.id))
                except InputError:
                    continue
        if not found:
            return DEFAULT_BUFFERS, (f"the default: no running {self.o.db} instance to "
                                     "follow")
        size, iid = max(found)
        avail = (read_meminfo(self.sr).available_kb or 0) * 1024
        spare = max(128 << 20, (avail - (2 << 30)) // 2) >> 27 << 27  # whole 128 MiB
        text = f"{max(128, min(size, spare) >> 20)}MB"
        if size > spare:
            return text, (f"{setting} of {iid} ({fmt_bytes(size)}), capped by the "
                          f"{fmt_bytes(avail)} of available memory")
        return text, f"follows {setting} of {iid}"

    def _choose_design(self, buffers: int) -> tuple[str, str]:
        """The design to run and why (restart wherever the others cannot measure the
        variants: host-wide knobs, a real instance, too few CPUs or too little memory)."""
        o = self.o
        if o.design not in DESIGNS:
            raise InputError(f"unknown design {o.design!r}; choose from {', '.join(DESIGNS)}")
        if o.design == "restart":
            return "restart", "asked for"
        want = AUTO_DESIGN if o.design == "auto" else o.design
        n = len(o.variants)
        host_wide = [v for v in o.variants if kind(v) not in PER_SERVER]
        avail = read_meminfo(self.sr).available_kb
        why = None
        if host_wide:
            why = (f"{', '.join(host_wide)} change{'s' if len(host_wide) == 1 else ''} "
                   "host-wide THP knobs, so every variant needs the host to itself")
        elif o.instance:
            why = "--instance measures one running server, which cannot be doubled"
        elif isinstance(blocker := self.target.twin_blocker(), str):
            why = blocker
        elif want == "simultaneous" and n > len(os.sched_getaffinity(0)):
            why = f"{n} variants need {n} CPUs to run side by side; this host gives us " \
                  f"{len(os.sched_getaffinity(0))}"
        elif avail is not None and buffers * n + (2 << 30) > avail * 1024:
            # every server's buffers at once (a pool's pages come out of MemAvailable too),
            # and 2 GiB for the clients, page tables and the page cache
            why = (f"{n} servers with {buffers >> 20} MiB of buffers each do not fit in "
                   f"{avail >> 10} MiB of available memory")
        if why is None:
            return want, ("the variants are per-server settings" if o.design == "auto"
                          else "asked for")
        if o.design != "auto":
            raise InputError(f"--design {o.design}: {why}; use --design restart")
        return "restart", why

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
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # restoring must not be cut short
            try:
                self.restore()
            finally:
                signal.signal(signal.SIGTERM, old_term)

    def _on_term(self, signum, frame):
        raise Interrupted()

    def _setup(self) -> None:
        o = self.o
        self.jdir = tempfile.mkdtemp(prefix="hpadvise-validate-journal-")
        self._update(phase="saving the host's knobs")
        for d in sorted(os.listdir("/sys/kernel/mm/hugepages")):
            a = Pool(int(d.split("-")[1][:-2]))
            self.baseline.append((a, a.get()))
        for k in ("enabled", "defrag", "shmem_enabled"):
            a = SysfsChoice(f"{THP}/{k}")
            self.baseline.append((a, a.get()))
        t = self.target
        t.setup(lambda text: self._update(phase=text))
        self.skipped = self._skips()
        o.variants = [v for v in o.variants if v not in self.skipped]
        if len(o.variants) < 2:
            raise InputError("fewer than two variants can run on this server: " + "; ".join(
                f"{v}: {why}" for v, why in self.skipped.items()))
        if self.design != "restart":
            self._hold_pools()
        elif "hugepages-1g" in map(kind, o.variants) and self._room_for_a_held_pool():
            # restarting per run, the 1 GiB pool would be grown again before each 1 GiB run
            # in memory the load and the 4 KiB runs have fragmented: hold it from the start
            if self._reserve_pools(only_kb=GIB_KB) and t.restart_starts:
                t.restart()  # a scratch server may have been stopped to free memory
        what = (f"loading TPC-C data ({o.scale} warehouse{'s' if o.scale > 1 else ''})"
                if o.bench == "tpcc" else f"loading pgbench data (scale {o.scale})")
        self._update(phase=what)
        self.bench = t.driver(o.bench, o.scale)
        if self.design != "restart":
            self._make_servers()
        defrag = (self.sr.read(f"{THP}/defrag", quiet_missing=True) or "")
        defrag = (re.search(r"\[(\S+)\]", defrag) or re.search(r"(\S+)", defrag or "?"))
        self.meta = {"skipped": self.skipped, "design": self.design,
                     "variant_knobs": {v: list(k) for v, k in self.held_knobs.items()
                                       if v in o.variants},
                     "design_reason": self.design_reason,
                     "rounds": o.rounds if self.design != "restart" else None,
                     "swap_s": o.swap_s if self.design == "simultaneous" else None,
                     "thp_defrag": defrag.group(1) if defrag else None,
                     "plan_thp": self._plan_thp(), "profile": o.profile,
                     "shared_buffers": t.buffers, "buffers_setting": t.buffers_setting,
                     "buffers_source": self.buffers_source,
                     "scale": o.scale, "db": o.db, "bench": o.bench, "target": t.label,
                     "workload": "tpcc" if o.bench == "tpcc" else o.workload,
                     "clients": o.clients, "run_s": o.run_s, "warm_s": o.warm_s,
                     "variants": o.variants, "pairs": pairs_for(o.variants),
                     "server_version": t.server(),
                     "target_ci_pct": o.target_ci_pct, "band_pct": o.band_pct,
                     "dtlb_counters": self.pmu,
                     "setup_s": round(time.time() - self.state.started, 1)}
        self.state.started = time.time()  # the budget covers the runs, not the data load

    def _hold_pools(self) -> None:
        """Side by side, before the data is loaded: the pools every huge page variant needs,
        reserved while memory is least fragmented and held for the whole run. The recommended
        variant must not need a host-wide THP change (it would reach every server): then the
        restart design runs. With pools held, the server restarts (huge_pages = try) so that
        the load fills buffers on the held pages instead of 4 KiB memory besides them."""
        o, t = self.o, self.target
        if "recommended" in map(kind, o.variants):
            host = [f"{a.label} = {new}" for a, new in self._variant_steps("recommended", t)
                    if isinstance(a, SysfsChoice) and not a.same(a.get(), new)]
            if host:
                why = f"the recommended plan changes {', '.join(host)} host-wide"
                if o.design != "auto":
                    raise ValidateError(f"--design {o.design}: {why}; use --design restart")
                self.design, self.design_reason = "restart", why
                return
        if self._reserve_pools():
            t.restart()

    def _make_servers(self) -> None:
        """One server per variant for the resident and simultaneous designs: the target, and
        copies with the same data for the others (which variant runs on which server changes
        from epoch to epoch: _assign_servers)."""
        o, t = self.o, self.target
        self.made = [(t, self.bench)]
        for i, v in enumerate(o.variants[1:], 2):
            self._update(phase=f"copying the server for variant {v} ({i} of {len(o.variants)})")
            tw = t.twin()
            self.twins.append(tw)
            self.made.append((tw, tw.driver(o.bench, o.scale, load=False)))
        self._assign_servers(0)

    def _assign_servers(self, epoch: int) -> None:
        """Variant i runs on server (i + epoch) mod n in this epoch. A server's own traits
        (the original or a copy; where its files lie on disk and in the page cache) would
        otherwise stay with one variant for the whole run and shift its estimate; rotated,
        they fall on every variant alike and widen the interval instead, as other
        start-to-start variation does."""
        n = len(self.made)
        self.servers = {v: self.made[(i + epoch) % n] for i, v in enumerate(self.o.variants)}

    def _room_for_a_held_pool(self) -> bool:
        """Whether a 1 GiB pool for the server's buffers can be held while a 4 KiB variant's
        server runs: the buffers in whole GiB, the buffers again and 2 GiB for the rest, as
        _choose_design asks of two servers side by side."""
        avail = read_meminfo(self.sr).available_kb
        b = self.target.buffers_bytes()
        return avail is not None and -(-b >> 30) * (1 << 30) + b + (2 << 30) <= avail * 1024

    def _reserve_pools(self, only_kb: int | None = None) -> bool:
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
        True when pools were touched (the server may have been stopped to free memory for
        them)."""
        need: dict[int, tuple[Pool, int, list[str]]] = {}
        for v in self.o.variants:
            for a, new in self._variant_steps(v, self.target):
                if isinstance(a, Pool) and only_kb in (None, a.size_kb):
                    pool, have, users = need.get(a.size_kb, (a, a.get(), []))
                    need[a.size_kb] = (pool, have + max(0, new - a.get()), users + [v])
        if not need:
            return False
        self._update(phase="reserving the huge page pools for the whole run")
        self._current = "pools held for the whole run"
        for size in sorted(need, reverse=True):
            pool, n, users = need[size]
            try:
                self._apply([(Compact(), True), (pool, n)], self.target)
            except ValidateError as exc:
                if {kind(u) for u in users} != {"hugepages-1g"} \
                        or len(self.o.variants) - len(users) < 2:
                    raise
                self._unapply()  # this pool's journal only: the held ones are set aside
                for u in users:
                    self.skipped[u] = str(exc)
                    self.o.variants.remove(u)
                self._update(phase=f"skipping hugepages-1g: {exc}")
                continue
            self.reserved.append(self.active.pop())  # rolled back by restore()
            self.held_kb.add(size)
            for v in users:  # named among each user's knobs (meta is made after this)
                self.held_knobs.setdefault(v, []).append(
                    f"{pool.label} = {n} (held for the whole run)")
        return True

    def _epoch_steps(self, v: str, t: BenchTarget) -> list[tuple[Action, object]]:
        """A variant's switches for one server side by side: its own settings only. Pools
        are held for the whole run (_reserve_pools) and THP knobs are left alone (a
        recommended plan that changes them runs the restart design)."""
        return [(a, new) for a, new in self._variant_steps(v, t)
                if not isinstance(a, (Pool, Compact, SysfsChoice))]

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
                                      f"{self.samples[-1].tps:,.0f} TPS")
            block += 1
            block_times.append(time.time() - t0)
            effects = self.effects()
            if stats.should_stop(list(effects.values()), o.target_ci_pct, o.min_blocks):
                self.meta["stopped"] = EARLY_STOP
                return
            remaining = o.duration_s - self.state.elapsed
            if remaining < max(block_times):
                self.meta["stopped"] = "time budget used"
                return

    def _variant_steps(self, v: str, t: BenchTarget | None = None
                       ) -> list[tuple[Action, object]]:
        """What variant v changes, for server t (the target unless another is named)."""
        t, v = t or self.target, kind(v)
        if v == "current":
            return []
        if v in ("thp-always", "thp-never"):
            return [(SysfsChoice(f"{THP}/enabled"), v.split("-")[1])]
        if v == "thp-shmem":
            return [(SysfsChoice(f"{THP}/shmem_enabled"), "always")]
        if v == "hugepages-off":
            return t.hugepages_off()
        if v == "hugepages-1g":
            return self._gig_steps(t)
        # recommended: the plan for this server, as `apply` would make it
        from hpadvise import apply as ap_mod
        from hpadvise.engines import Targets
        from hpadvise.plan import build, inspect
        report = inspect(self.sr, self.o.profile, Targets(), [self.o.db])
        sel = ap_mod.select_instances(report, [self.o.db], t.instance_ref, None)
        report = build(report.host, sel, report.profile, report.engines)
        plan = ap_mod.prepare(report, report.engines, restart=False, persist=False)
        return [(s.action, s.new) for s in plan.steps if s.phase in ("runtime", "engine")]

    def _plan_thp(self) -> dict[str, str]:
        """The THP modes `check` recommends for this host under the profile (its plan's THP
        changes over the values now), read before any variant is applied: the report's advice
        quotes them, so that validate's words and check's never disagree."""
        from hpadvise.engines import Targets
        from hpadvise.plan import inspect, knob_now, plan_knobs
        report = inspect(self.sr, self.o.profile, Targets())  # every engine, as check does
        want = plan_knobs(report)  # a knob the profile keeps is not in it: its value now
        out = {k: want.get(f"thp.{k}") or knob_now(report.host, f"thp.{k}")
               for k in ("enabled", "defrag", "shmem_enabled")}
        return {k: str(v) for k, v in out.items() if v}

    def _gig_steps(self, t: BenchTarget) -> list[tuple[Action, object]]:
        """The server on 1 GiB pages: the engine's setting, and a 1 GiB pool for its demand at
        that size (the plan's count), on top of what the pool holds."""
        from hpadvise.engines import Targets
        from hpadvise.plan import inspect
        from hpadvise import apply as ap_mod
        steps = t.page_size_steps(GIB_KB)
        report = inspect(self.sr, self.o.profile, Targets(), [self.o.db])
        [inst] = ap_mod.select_instances(report, [self.o.db], t.instance_ref, None)
        pool = Pool(GIB_KB)
        return [(pool, pool.get() + inst.demand.pages[GIB_KB])] + list(steps)

    def _skips(self) -> dict[str, str]:
        """Variants that cannot change anything for this server, and why."""
        out: dict[str, str] = {}
        pid = self.target.pid()
        status = self.sr.read(f"/proc/{pid}/status", quiet_missing=True) if pid else None
        if status and re.search(r"^THP_enabled:\s*0", status, re.M):
            for v in ("thp-always", "thp-never", "thp-shmem"):
                out[v] = ("the server turned THP off for itself (prctl PR_SET_THP_DISABLE; "
                          f"/proc/{pid}/status THP_enabled: 0): THP knobs cannot reach it")
        if "hugepages-1g" in map(kind, self.o.variants):
            why = self.target.page_size_steps(GIB_KB)
            if isinstance(why, str):
                out["hugepages-1g"] = why
            elif not self.sr.exists(f"/sys/kernel/mm/hugepages/hugepages-{GIB_KB}kB"):
                out["hugepages-1g"] = "this host has no 1 GiB pages"
        return {v: out[kind(v)] for v in self.o.variants if kind(v) in out}

    def _apply(self, steps: list[tuple[Action, object]], t: BenchTarget | None = None) -> None:
        """Switch into the variant being applied (self._current) on server t."""
        t = t or self.target
        # a directory per switch: journals are named by the second they start in
        j = jr.Journal.create(tempfile.mkdtemp(dir=self.jdir), {"argv": ["validate"]})
        self.active.append(j)
        knobs = self.meta.setdefault("variant_knobs", {}).setdefault(self._current, [])
        for action, new in steps:
            shown = new.get("value") if isinstance(new, dict) else new
            if f"{action.label} = {shown}" not in knobs:
                knobs.append(f"{action.label} = {shown}")
            old = action.get()
            if action.same(old, new):
                continue
            e = j.intent(action, old, new)
            action.set(new)
            ok, actual = action.verify(new)
            if not ok and isinstance(action, Pool) and t.restart_starts:
                # the scratch server's own 4 KiB shared memory may be what fragments RAM: stop
                # it (the variant's restart starts it again) and ask once more
                # (compaction skips pages under writeback, mm/migrate.c: write them back
                # first; cheap, though the 1 GiB shortfalls seen here did not yield to it)
                self._update(phase="stopping the server to free memory for the pool")
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

    def _unapply(self) -> None:
        while self.active:
            j = self.active[-1]
            jr.rollback(j)
            j.mark_rolled_back([])
            self.active.pop()

    def _restart(self) -> None:
        self.restarted = True
        self.target.restart()

    def _one(self, block: int, v: str) -> Sample:
        """The restart design's run: switch, restart, prewarm, measure, switch back."""
        t = self.target
        self._update(phase="switching")
        self._current = v
        # a held pool already has this variant's pages (it was sized for them)
        self._apply([(a, new) for a, new in self._variant_steps(v)
                     if not (isinstance(a, Pool) and a.size_kb in self.held_kb)])
        try:
            self._restart()
            self._update(phase="prewarming")
            t.prewarm()
            [sample] = self._measure([(v, t, self.bench, None)], block, block)
        finally:
            self._unapply()
        return sample

    # ---- the resident and simultaneous designs
    def _loop_epochs(self) -> None:
        o = self.o
        epoch = 0
        epoch_times: list[float] = []
        groups = _cpu_groups(len(o.variants))
        while True:
            t0, n0 = time.time(), len(self.samples)
            self._start_epoch(epoch)
            try:
                for r in range(o.rounds):
                    blk = epoch * o.rounds + r
                    if self.design == "simultaneous":
                        # variant i on CPU group (i + r) mod n: each server meets every group
                        jobs = [(v, *self.servers[v], groups[(i + r) % len(groups)])
                                for i, v in enumerate(o.variants)]
                        self._update(variant="all at once", block=blk + 1)
                        got = self._measure(jobs, blk, epoch)
                    else:
                        order = list(o.variants) if blk % 2 == 0 else list(reversed(o.variants))
                        got = []
                        for v in order:
                            self._update(variant=v, block=blk + 1)
                            got += self._measure([(v, *self.servers[v], None)], blk, epoch)
                    self.samples += got
                    self._update(last_run=f"epoch {epoch + 1} round {r + 1}: " + ", ".join(
                        f"{s.variant} {s.tps:,.0f} TPS" for s in got))
            except RunOverrun:
                del self.samples[n0:]  # only whole epochs count (every CPU, every round)
                raise
            finally:
                self._end_epoch()
            epoch += 1
            epoch_times.append(time.time() - t0)
            if stats.should_stop(list(self.effects().values()), o.target_ci_pct, o.min_blocks):
                self.meta["stopped"] = EARLY_STOP
                return
            if o.duration_s - self.state.elapsed < max(epoch_times):
                self.meta["stopped"] = "time budget used"
                return

    def _start_epoch(self, epoch: int) -> None:
        """Every server switched into its variant, (re)started and prewarmed. The switches are
        read off the running servers (the plan needs them running); then every server stops
        and the variants that take huge pages start first, so that a server on
        `huge_pages = try` finds no free pages of the held pools and stays on 4 KiB pages."""
        self._assign_servers(epoch)
        steps = {v: self._epoch_steps(v, self.servers[v][0]) for v in self.o.variants}
        for t, _ in self.servers.values():
            t.stop()
        for v in self.o.variants:
            self._update(phase=f"epoch {epoch + 1}: switching {v}", variant=v)
            self._current = v
            self._apply(steps[v], self.servers[v][0])
        order = _start_order(self.o.variants, epoch)
        for v in order:
            t, _ = self.servers[v]
            self._update(phase=f"epoch {epoch + 1}: starting {v}", variant=v)
            self.restarted = True
            t.restart()
            self._update(phase=f"epoch {epoch + 1}: prewarming {v}")
            t.prewarm()

    def _end_epoch(self) -> None:
        """Every variant's knobs back, the servers still running (as the restart design does
        after each run): the plan of the next epoch is read off running servers, and a pool
        shrunk under a server's feet keeps its pages as surplus until it restarts."""
        self._unapply()

    # ---- measuring
    def _logprefix(self, t: BenchTarget) -> str | None:
        if self.o.bench != "pgbench":
            return None
        # per-transaction logs, in a directory the server user owns
        logdir = tempfile.mkdtemp(prefix="hpadvise-pgbench-", dir=t.tmpdir)
        shutil.chown(logdir, t.owner)
        return f"{logdir}/pgbench_log"

    def _measure(self, jobs, block: int, epoch: int) -> list[Sample]:
        """Run the benchmark on every (variant, server, driver, cpus) of `jobs` at once (one
        job but in the simultaneous design), each server and its clients on its CPUs where
        cpus is given. The clients are shared out among the servers, so the machine carries
        the same load in every design."""
        o = self.o
        clients = max(1, o.clients // len(jobs))
        _pin_trees(self.sr, [(t.pid(), cpus) for _, t, _, cpus in jobs if cpus is not None])
        started = time.time()
        try:
            runs, mem, ptes, thp, steal, dtlb, trades = self._bench(
                [(drv, self._logprefix(t), cpus) for _, t, drv, cpus in jobs], clients,
                [t.pid() for _, t, _, _ in jobs])
        except RunOverrun as exc:
            names = " and ".join(v for v, _, _, _ in jobs)
            raise RunOverrun(f"the run of {names} in block {block + 1} {exc}; its clients were "
                             "stopped and the verdict is on the whole epochs before it") from None
        finally:
            _pin_trees(self.sr, [(t.pid(), _ALL_CPUS) for _, t, _, cpus in jobs
                                 if cpus is not None])
        return [Sample(block, v, run.tps, run.latency_avg_ms, run.p50_ms, run.p95_ms,
                       run.p99_ms, pte if pte is not None else mem.get("page_tables_kb"),
                       mem.get("anon_huge_kb"),
                       mem.get("shmem_huge_kb"), mem.get("hugetlb_kb"), t.backing(), thp,
                       run.progress, round(started, 1), steal, dtlb, epoch,
                       sorted(cpus) if cpus is not None else None, self._server_no(t), traded)
                for (v, t, _, cpus), run, pte, traded in zip(jobs, runs, ptes, trades)]

    def _server_no(self, t: BenchTarget) -> int | None:
        return next((i for i, (m, _) in enumerate(self.made) if m is t), None)

    def _bench(self, jobs, clients: int, pids: list[int | None]):
        """One benchmark invocation per (driver, logprefix, cpus), all at once: warm_s seconds
        of warm-up that the drivers leave out of their figures, then the measured seconds. The
        -P/--report-interval lines feed the live display; /proc/meminfo and each server's page
        tables (pids: its main process) are sampled while the clients are connected (page
        tables exist only while backends map the memory) and the
        thp_* counters, CPU steal and dTLB counters around the measured part (host-wide: with
        servers side by side they cover all of them)."""
        o = self.o
        warm_s, seconds = o.warm_s, o.run_s
        procs = []
        try:
            for drv, logprefix, cpus in jobs:
                procs.append(_start_pinned(lambda: drv.start(
                    o.workload, clients, seconds, logprefix, warm_s), cpus))
        except BaseException:
            _kill_all(procs)
            raise
        t0 = time.time()
        self._update(phase="warm-up")
        lines: list[list[str]] = [[] for _ in procs]
        live: list[float] = [0.0 for _ in procs]
        streams = [drv.stream(p) for (drv, _, _), p in zip(jobs, procs)]

        def follow(i: int) -> None:
            drv = jobs[i][0]
            for line in streams[i]:
                lines[i].append(line)
                tps = drv.live_tps(line)
                if tps is not None:
                    live[i] = tps
                    self._update(live_tps=sum(live))
        threads = [threading.Thread(target=follow, args=(i,), daemon=True)
                   for i in range(len(procs))]
        for th in threads:
            th.start()
        groups = [cpus for _, _, cpus in jobs]
        swap = o.swap_s if len(jobs) > 1 and None not in groups + pids else 0
        turn = 0
        trades: list[int | None] = [0 if swap else None] * len(procs)
        mem: dict = {}
        ptes: list[int | None] = [None] * len(pids)
        before: dict | None = None
        cpu0 = None
        perf = None
        limit = warm_s + seconds + o.run_grace_s
        try:
            while any(p.poll() is None for p in procs):
                now = time.time() - t0
                if now > limit:
                    raise RunOverrun(f"was still going {now:.0f} s after it started, "
                                     f"{now - warm_s - seconds:.0f} s past its {warm_s} s of "
                                     f"warm-up and {seconds} s of measuring (a server that "
                                     "stopped making progress?)")
                if swap and (k := _turn(now, warm_s, swap)) != turn:
                    turn = k
                    on = [(groups[(i + turn) % len(groups)], (pids[i], p.pid))
                          for i, p in enumerate(procs)]
                    _pin_trees(self.sr, [(pid, cpus) for cpus, both in on for pid in both])
                    for i, (cpus, both) in enumerate(on):
                        try:
                            took = all(os.sched_getaffinity(x) == set(cpus) for x in both)
                        except OSError:  # the client just ended
                            took = False
                        trades[i] += took
                if before is None and now >= warm_s:
                    before = _thp_counters(self.sr)
                    cpu0 = read_cpu_times(self.sr)
                    perf = self._perf_start(seconds)
                    self._update(phase="measuring")
                if not mem and now >= warm_s + seconds * 0.8:
                    mem = _meminfo(self.sr)
                    ptes = _server_page_tables_kb(self.sr, pids)
                time.sleep(0.1)
        except BaseException:
            _kill_all(procs)
            raise
        runs = []
        for i, ((drv, logprefix, _), p) in enumerate(zip(jobs, procs)):
            threads[i].join(timeout=5)
            if streams[i] is p.stderr:
                p.stderr = None  # already consumed by follow()
            else:
                p.stdout = None
            runs.append(drv.finish(p, logprefix, lines[i], warm_s))
        after = _thp_counters(self.sr)
        steal = _steal_pct(cpu0, read_cpu_times(self.sr))
        before = before or after
        thp = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        return (runs, mem or _meminfo(self.sr), ptes, thp, steal, self._perf_finish(perf),
                trades)

    def _perf_start(self, seconds: int):
        """dTLB counters over the measured part, host-wide (`perf stat -a`: the server's
        backends come and go), where the kernel exposes a CPU PMU; None elsewhere."""
        if self.pmu != "present" or not shutil.which("perf"):
            return None
        out = tempfile.NamedTemporaryFile(prefix="hpadvise-perf-", suffix=".csv", delete=False)
        out.close()
        p = subprocess.Popen(["perf", "stat", "-x,", "-a", "-o", out.name, "-e",
                              ",".join(dtlb_events()), "--", "sleep", str(seconds)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return p, out.name

    @staticmethod
    def _perf_finish(perf) -> dict | None:
        if perf is None:
            return None
        p, path = perf
        try:
            p.wait(timeout=30)
            with open(path, errors="replace") as f:
                return parse_perf_csv(f.read())
        except (OSError, subprocess.TimeoutExpired):
            p.kill()
            return None
        finally:
            os.unlink(path)

    def _update(self, **kw) -> None:
        for k, v in kw.items():
            setattr(self.state, k, v)
        self.on_update(self.state)

    # ---- results
    def effects(self) -> dict[tuple[str, str], stats.Effect]:
        """B over A per pair, one paired unit per epoch (a start of every variant's server):
        the geometric mean of the epoch's runs of each variant. Runs within one start of a
        server share its memory layout, so they are not independent of each other; epochs
        are (docs/design.md, "Validating")."""
        out = {}
        for a, b in pairs_for(self.o.variants):
            epochs = sorted({_unit(s) for s in self.samples})
            ta, tb = [], []
            for ep in epochs:
                sa = [s.tps for s in self.samples if _unit(s) == ep and s.variant == a]
                sb = [s.tps for s in self.samples if _unit(s) == ep and s.variant == b]
                if sa and sb and len(sa) == len(sb):
                    ta.append(stats.geomean(sa))
                    tb.append(stats.geomean(sb))
            out[(a, b)] = stats.paired_effect(ta, tb, self.o.band_pct)
        return out

    def restore(self) -> None:
        """Back to exactly how the host was: the variant's journal, then every saved knob,
        then the scratch server is removed."""
        errors = []
        try:
            self._unapply()
        except Exception as exc:
            errors.append(str(exc))
        t = self.target
        if t is not None and t.restarts_instance and self.restarted:
            try:  # back to the settings it ran with, on the pages it had
                self._restart()
            except Exception as exc:
                errors.append(f"restarting {self.o.instance}: {exc}")
        for server in [t, *self.twins]:
            if server is not None:
                server.stop()  # release its huge pages before the pools shrink
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
        for server in [*self.twins, t]:
            if server is not None:
                try:
                    server.destroy()
                except Exception as exc:
                    errors.append(f"removing the scratch data: {exc}")
        if self.jdir:
            shutil.rmtree(self.jdir, ignore_errors=True)
        self.meta["restore_errors"] = errors

    def result(self) -> dict:
        eff = self.effects()
        return {
            "schema_version": 1,
            "meta": {**self.meta, "interrupted": self.interrupted,
                     "elapsed_s": round(self.state.elapsed, 1)},
            "samples": [asdict(s) for s in self.samples],
            "effects": [{"a": a, "b": b, **asdict(e), "half_width_pct": e.half_width_pct}
                        for (a, b), e in eff.items()],
            "variants": {v: _summary([s for s in self.samples if s.variant == v])
                         for v in self.o.variants},
        }


def _start_order(variants: list[str], epoch: int) -> list[str]:
    """The order the servers start in at an epoch: those on huge pages first, so that a
    server on `huge_pages = try` finds no free pages of the held pools and stays on 4 KiB
    pages. Among servers alike, the order turns every n epochs (n servers), so that starting
    (and prewarming) later is not always the same variant's lot, and, with the servers
    turning every epoch (_assign_servers), not always the same server's either."""
    n = len(variants)
    k = (epoch // n) % n if n else 0
    turned = variants[k:] + variants[:k]
    return sorted(turned, key=lambda v: kind(v) not in ("recommended", "hugepages-1g"))


def _unit(s: Sample) -> int:
    return s.epoch if s.epoch is not None else s.block


def _summary(samples: list[Sample]) -> dict:
    if not samples:
        return {"runs": 0}
    tps = [s.tps for s in samples]
    mean = sum(tps) / len(tps)
    sd = math.sqrt(sum((x - mean) ** 2 for x in tps) / (len(tps) - 1)) if len(tps) > 1 else 0.0
    h = stats.t975(len(tps) - 1) * sd / math.sqrt(len(tps)) if len(tps) > 1 else math.nan

    def med(key):
        vals = sorted(getattr(s, key) for s in samples if getattr(s, key) is not None)
        return vals[len(vals) // 2] if vals else None

    return {"runs": len(tps), "tps_mean": mean, "tps_ci95": h, "p50_ms": med("p50_ms"),
            "p95_ms": med("p95_ms"), "p99_ms": med("p99_ms"),
            "page_tables_kb": med("page_tables_kb"), "anon_huge_kb": med("anon_huge_kb"),
            "shmem_huge_kb": med("shmem_huge_kb"),
            "steal_pct_max": max((s.steal_pct for s in samples if s.steal_pct is not None),
                                 default=None),
            "backing": samples[-1].backing}
