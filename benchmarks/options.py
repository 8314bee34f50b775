"""validate's options: checked, and their defaults filled in from the host, before anything
changes; and the choice of design (docs/design.md, "Validating")."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

from hpadvise.engines import Targets, registry
from hpadvise.errors import InputError
from hpadvise.host import read_meminfo
from hpadvise.pipeline import inspect
from hpadvise.sizing import fmt_bytes, parse_bytes
from hpadvise.sysroot import SysRoot

from .drivers import BENCHMARKS
from .variants import VARIANTS, host_wide, kind, labels_for, phases_for

DESIGNS = ("auto", "restart", "resident", "simultaneous")
# What "auto" picks where the variants allow it: the design with the narrowest CI in the
# side-by-side series in lab/README.md ("Designs of a validate run").
AUTO_DESIGN = "simultaneous"
# The scratch server's buffers when neither --buffers nor a running instance says.
DEFAULT_BUFFERS = "1GB"


@dataclass
class Options:
    variants: list[str]
    duration_s: int
    db: str  # the engine (its plugin provides the server under test)
    bench: str = ""  # one of drivers.BENCHMARKS (the engine's first when empty)
    workload: str | None = None  # one of the benchmark's workloads (its first when None)
    clients: int = 16
    scale: int | None = None
    run_s: int | None = None
    warm_s: int | None = None
    target_ci_pct: float | None = None  # None: use the whole budget (see stats.should_stop)
    band_pct: float = 1.0
    buffers: str | None = None  # the server's buffers (None: follow the host's instance)
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
    # simultaneous: each server and its clients on CPUs of their own (False: wherever the
    # kernel puts them, an experiment to see what pinning does; lab/validate_shared_cpus.py)
    pin_cpus: bool = True
    # how long a run may go on past its warm-up and measured seconds before its clients are
    # stopped: pgbench -T and sysbench --time end the clients on their own clock, so beyond
    # them only connecting and the final report remain (seconds); a run still going a
    # minute later is one whose server stopped making progress
    run_grace_s: int = 60


def check(o: Options, sr: SysRoot):
    """Every option checked and every default filled in before anything changes: returns
    the engine, its benchmark server (constructed: checks only), the design and why, and
    where the buffer size came from. Bad input is an InputError."""
    o.variants = labels_for(o.variants)
    bad = [v for v in o.variants if kind(v) not in VARIANTS]
    if bad:
        raise InputError(f"unknown variant {bad[0]!r}; choose from {', '.join(VARIANTS)}")
    if len(o.variants) < 2:
        raise InputError("give at least two variants to compare")
    engine = registry.get(o.db)
    if not engine.benches:
        raise InputError(f"validate does not support engine {o.db}; engines with "
                         "benchmarks: " + ", ".join(e.name for e in registry.all() if e.benches))
    o.bench = o.bench or engine.benches[0]
    if o.bench not in engine.benches:
        raise InputError(f"--bench {o.bench} does not run on --db {o.db}; use "
                         f"{' or '.join(engine.benches)}")
    b = BENCHMARKS[o.bench]
    o.workload = o.workload or b.workloads[0]
    if o.workload not in b.workloads:
        raise InputError(f"--workload {o.workload}: {o.bench} runs "
                         f"{' or '.join(b.workloads)}")
    if os.geteuid() != 0:
        raise InputError("validate switches huge pages and THP and needs root; run it with "
                         "sudo")
    if b.needs and shutil.which(b.needs[0]) is None:
        raise InputError(f"{b.needs[0]} not found; install it (Debian: apt-get install "
                         f"{b.needs[1]})")
    given = o.buffers is not None
    o.buffers = o.buffers or DEFAULT_BUFFERS
    parse_bytes(o.buffers, "--buffers")
    target = engine.bench_target(o)  # checks only: binaries, the instance
    if given or o.instance:
        buffers_source = "given" if given else "the instance's own"
    else:
        o.buffers, buffers_source = default_buffers(o, target, sr)
        target.buffers = o.buffers
    sb = target.buffers_bytes()
    per_mb = b.mb_per_unit
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
        # seconds (lab/README.md). ~1 s per GiB of buffers, 3..20 s.
        o.warm_s = max(3, min(20, round(3 + sb / (1 << 30))))
    design, design_reason, phases = choose_design(o, target, sb, sr)
    n = len(o.variants) - len([v for v in phases if host_wide(v)])  # servers side by side
    if o.rounds is None:
        # simultaneous: every server once on every CPU group per epoch (the CPUs' own
        # differences cancel within an epoch); resident: two rounds, ABBA within the epoch
        o.rounds = n if design == "simultaneous" else 2
    if o.rounds < 1:
        raise InputError(f"--rounds {o.rounds}: give at least 1")
    if o.swap_s is not None and o.swap_s < 0:
        raise InputError(f"--swap-seconds {o.swap_s}: give 0 (no swapping within a run) "
                         "or more")
    if o.run_s is None:
        # 30 s measured: shorter windows were dominated by this VM's few-second dips (sd of
        # the block ln-ratio 0.06-0.07 at 10-20 s, 0.05 at 25-30 s; lab/README.md).
        # Shortened when the budget cannot otherwise hold min_blocks epochs, with ~12 s of
        # restart and prewarm per server start.
        # With THP phases, min_blocks whole cycles (one epoch per phase).
        epoch = o.duration_s / (o.min_blocks * max(1, len(phases)))
        if design == "restart":
            per = epoch / n - 12 - o.warm_s
        else:
            runs = o.rounds * (1 if design == "simultaneous" else n)
            per = (epoch - 12 * n) / runs - o.warm_s
        o.run_s = max(3, min(30, int(per)))
    if o.swap_s is None:
        # Simultaneous: pinned for a whole run, a run's ln ratio carried a level of its own
        # (sd ~0.06 between the rounds of one epoch, not the CPUs' lasting difference and
        # not the servers'), two thirds of an A/A's epoch variance; trading CPUs every
        # ~3 s within the run cut it to 0.007-0.019, twice what per-second noise predicts
        # at most (lab/README.md, "Trading CPUs within a run"). Pieces of
        # ~3 s: the per-second ratio's autocorrelation is gone after 2-3 s, and a trade
        # moves every thread of a server and its clients. The run is cut into a multiple
        # of n pieces, so each server spends equal time on every CPU group.
        pieces = n * max(1, round(o.run_s / (3 * n)))
        o.swap_s = o.run_s / pieces if design == "simultaneous" else 0
    return engine, target, design, design_reason, phases, buffers_source

def default_buffers(o: Options, target, sr: SysRoot) -> tuple[str, str]:
    """The scratch server's buffers when none are given: those of the largest running
    instance of the engine on this host (what the user will run), capped so that the
    host keeps room for a second copy or a pool of the same size and 2 GiB besides."""
    setting = target.buffers_setting
    found = []
    for i in inspect(sr, o.profile, Targets(), [o.db]).instances:
        if i.running and i.engine == o.db and i.settings.get(setting):
            try:
                found.append((parse_bytes(str(i.settings[setting]), setting), i.id))
            except InputError:
                continue
    if not found:
        return DEFAULT_BUFFERS, (f"the default: no running {o.db} instance to "
                                 "follow")
    size, iid = max(found)
    avail = (read_meminfo(sr).available_kb or 0) * 1024
    spare = max(128 << 20, (avail - (2 << 30)) // 2) >> 27 << 27  # whole 128 MiB
    text = f"{max(128, min(size, spare) >> 20)}MB"
    if size > spare:
        return text, (f"{setting} of {iid} ({fmt_bytes(size)}), capped by the "
                      f"{fmt_bytes(avail)} of available memory")
    return text, f"follows {setting} of {iid}"

def choose_design(o: Options, target, buffers: int, sr: SysRoot
                  ) -> tuple[str, str, list[str]]:
    """The design to run, why, and its THP phases (variants.phases_for: THP variants as
    phases of a side-by-side run, so that the comparisons between per-server variants still
    run side by side). Restart wherever the others cannot measure the variants: host-wide
    knobs with no side-by-side comparison to keep, a real instance, too few CPUs or too
    little memory."""
    if o.design not in DESIGNS:
        raise InputError(f"unknown design {o.design!r}; choose from {', '.join(DESIGNS)}")
    if o.design == "restart":
        return "restart", "asked for", []
    want = AUTO_DESIGN if o.design == "auto" else o.design
    phases = phases_for(o.variants)
    servers = [v for v in o.variants if not host_wide(v)] if phases else o.variants
    n = len(servers)
    host = [v for v in o.variants if host_wide(v)]
    avail = read_meminfo(sr).available_kb
    why = None
    if host and not phases:
        why = (f"{', '.join(host)} change{'s' if len(host) == 1 else ''} host-wide THP "
               "knobs and no comparison of per-server settings with current runs beside "
               "them, so every variant needs the host to itself")
    elif o.instance:
        why = "--instance measures one running server, which cannot be doubled"
    elif isinstance(blocker := target.twin_blocker(), str):
        why = blocker
    elif want == "simultaneous" and n > len(os.sched_getaffinity(0)):
        why = f"{n} servers ({', '.join(servers)}) need {n} CPUs to run side by side; " \
              f"this host gives us {len(os.sched_getaffinity(0))}"
    elif avail is not None and buffers * n + (2 << 30) > avail * 1024:
        # every server's buffers at once (a pool's pages come out of MemAvailable too),
        # and 2 GiB for the clients, page tables and the page cache
        why = (f"{n} servers with {buffers >> 20} MiB of buffers each do not fit in "
               f"{avail >> 10} MiB of available memory")
    if why is None:
        said = "the variants are per-server settings" if o.design == "auto" else "asked for"
        if phases:
            said += (f"; {', '.join(p for p in phases if host_wide(p))} change host-wide THP "
                     "knobs, so they are phases: the THP setting changes from epoch to epoch "
                     f"while {', '.join(servers)} run side by side in each")
        return want, said, phases
    if o.design != "auto":
        raise InputError(f"--design {o.design}: {why}; use --design restart")
    return "restart", why, []
