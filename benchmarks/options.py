"""validate's options: checked, and their defaults filled in from the host, before anything
changes (the design is chosen in design.py; docs/design.md, "Validating")."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

from hpadvise.api.face import counted, fmt_bytes, InputError, parse_bytes, SysRoot, Targets
from hpadvise.act.face import (GIB_KB, KnobId, knob_now, plan_knobs, registry, report_of,
                               select, survey, THP_FILES)

from .budget import (MIN_RUN_S, MIN_SCALE_SHARE, START_S, START_S_PER_GIB, clients_for,
                     default_rounds, disk_need, duration_for, fitting_scale, planned_run_s,
                     run_seconds, swap_seconds)
from .drivers import BENCHMARKS
from .design import choose_design
from .own import check_own
from .variants import VARIANTS, host_wide, kind, labels_for

# The scratch server's buffers when neither --buffers nor a running instance says.
DEFAULT_BUFFERS = "1GB"


@dataclass(frozen=True)
class Options:
    """What validate runs, as given (the CLI) and then as settled (check: a new value with
    every default filled in). Never changed in place: a value derived later (a replay's run
    length, the variants a host cannot run) is a new Options, `dataclasses.replace`."""
    variants: tuple[str, ...]
    duration_s: int
    db: str  # the engine (its plugin provides the server under test)
    bench: str = ""  # one of drivers.BENCHMARKS (the engine's first when empty)
    workload: str | None = None  # one of the benchmark's workloads (its first when None)
    clients: int | None = None  # None: budget.clients_for()
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
    journal_dir: str | None = None  # where validate journals what it changes (None: apply's)
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
    # minute later is one whose server stopped making progress (--run-grace)
    run_grace_s: int = 60
    # the engines' own options given on the command line (--pg-bindir ...)
    targets: Targets = field(default_factory=Targets)
    variants_given: bool = True  # False: the default variants, which validate may trim
    # variants left out before anything runs, and why (a budget too short for them)
    dropped: Mapping[str, str] = field(default_factory=dict)
    # the host as validate surveyed it, once, before anything changes (see()): its servers
    # are planned from it as apply plans (switching.py)
    survey: Any = field(default=None, repr=False)
    # the engine's running instances in that survey: engines are handed them, and never
    # inspect the host
    seen: tuple = field(default=(), repr=False)
    found: Any = field(default=None, repr=False)  # the running instance --instance names
    # the THP modes check recommends for this host, from the same inspection (see()),
    # before validate changes anything: (file, mode) pairs, quoted by the report's advice
    thp_plan: tuple[tuple[str, str], ...] = ()
    # why the defaults became what they are where the host decided (clients, scale), for
    # the report
    default_notes: tuple[str, ...] = ()
    start_s: float | None = None  # seconds a server start costs an epoch (budget.start_seconds)
    # the user's own workload and data (benchmarks/own.py)
    script: str | None = None  # a pgbench script or sysbench Lua script
    copy: bool = False  # the scratch servers are copies of --instance
    replay: str | None = None  # a statement log, or a capture directory, to replay
    replay_speed: float | None = None  # pgreplay -s (None: as fast as the server goes)
    database: str | None = None  # the copy's database a --script runs in
    script_hash: str | None = None
    replay_hash: str | None = None

    def __post_init__(self):
        for name in ("variants", "seen", "default_notes"):  # sequences as tuples: no append
            object.__setattr__(self, name, tuple(getattr(self, name)))
        # a read-only view of its own copy: a derived value says what it drops with replace()
        object.__setattr__(self, "dropped", MappingProxyType(dict(self.dropped)))

    def noted(self, why: str, **changes) -> Options:
        """A new value with `changes` and a note on a default the host decided."""
        return replace(self, default_notes=(*self.default_notes, why), **changes)


def check(given: Options, sr: SysRoot):
    """Every option checked and every default filled in before anything changes: returns
    the settled options (a new value: `given` stays as the user gave it), the engine, its
    benchmark server (constructed: checks only), the design and why, and where the buffer
    size came from. Bad input is an InputError."""
    o = replace(given, variants=labels_for(given.variants))
    bad = [v for v in o.variants if kind(v) not in VARIANTS]
    if bad:
        raise InputError(f"unknown variant {bad[0]!r}; choose from {', '.join(VARIANTS)}")
    if len(o.variants) < 2:
        raise InputError("give at least two variants to compare")
    engine = registry.get(o.db)
    o = check_own(o)
    if not engine.benches:
        raise InputError(f"validate does not support engine {o.db}; engines with "
                         "benchmarks: " + ", ".join(e.name for e in registry.all() if e.benches))
    if o.replay and "replay" not in engine.benches:
        able = ", ".join(e.name for e in registry.all() if "replay" in e.benches)
        raise InputError(f"--replay runs on {able} only; for --db {o.db} give --script FILE "
                         "(a sysbench Lua script)")
    o = replace(o, bench=o.bench or engine.benches[0])
    if o.bench not in engine.benches:
        raise InputError(f"--bench {o.bench} does not run on --db {o.db}; use "
                         f"{' or '.join(engine.benches)}")
    b = BENCHMARKS[o.bench]
    o = replace(o, workload=o.workload or b.workloads[0])
    if o.workload not in b.workloads:
        raise InputError(f"--workload {o.workload}: {o.bench} runs "
                         f"{' or '.join(b.workloads)}")
    if os.geteuid() != 0:
        raise InputError("validate switches huge pages and THP and needs root; run it with "
                         "sudo")
    if b.needs and shutil.which(b.needs[0]) is None:
        raise InputError(f"{b.needs[0]} not found; install it (Debian: apt-get install "
                         f"{b.needs[1]})")
    given_buffers = o.buffers is not None
    o = replace(o, buffers=o.buffers or DEFAULT_BUFFERS)
    parse_bytes(o.buffers, "--buffers")
    o = see(o, engine, sr)
    host = o.survey.facts  # the host as validate's one survey read it, before any change
    target = engine.bench_target(o)  # checks only: binaries, the instance
    source = getattr(target, "source", None)
    if source is not None:  # a copy runs with its source's buffers unless given
        if not given_buffers:
            o = replace(o, buffers=source.buffers)
            target.buffers = o.buffers
        buffers_source = "given" if given_buffers else f"the source's own ({source.label})"
    elif given_buffers or o.instance:
        buffers_source = "given" if given_buffers else "the instance's own"
    else:
        buffers, buffers_source = default_buffers(o, target, host)
        o = replace(o, buffers=buffers)
        target.buffers = o.buffers
    sb = target.buffers_bytes()
    per_mb = b.mb_per_unit
    scale_given = o.scale is not None
    copied = getattr(target, "data_bytes", None)  # the user's data: its size, not a scale
    if copied is not None:
        o = replace(o, scale=0)
    elif o.scale is None:  # the data fits in the buffers
        o = replace(o, scale=max(1, int(sb * 0.75 / (per_mb << 20))))
    if o.scale < 1 and copied is None:
        raise InputError(f"--scale {o.scale}: give at least 1")
    if o.clients is None and o.replay:
        o = replace(o, clients=1)  # a replay's sessions are the log's (its report says so)
    if o.clients is not None and o.clients < 1:
        raise InputError(f"--clients {o.clients}: give at least 1")
    if o.run_s is not None and o.run_s < 1:
        raise InputError(f"--run-seconds {o.run_s}: a run needs at least 1 second")
    if o.run_grace_s < 1:
        raise InputError(f"--run-grace {o.run_grace_s}: give at least 1 second (a run "
                         "still reports after its measured seconds)")
    if o.warm_s is not None and o.warm_s < 0:
        raise InputError(f"--warmup-seconds {o.warm_s}: give 0 or more")
    avail = (host.mem.available_kb or 0) * 1024
    if avail and sb + (2 << 30) > avail:  # one server and its clients, the least it takes
        raise InputError(f"{target.buffers_setting} {o.buffers} does not fit: a scratch "
                         f"server with these buffers and 2 GiB for its clients needs "
                         f"{fmt_bytes(sb + (2 << 30))}, {fmt_bytes(avail)} is available; "
                         "give smaller --buffers")
    o = replace(o, start_s=max(START_S, START_S_PER_GIB * sb / (1 << 30)))
    if o.warm_s is None:
        # With 4 KiB pages every backend faults the shared buffers into its own page tables
        # as its reads reach them: at shared_buffers=8GB, 16 clients, TPS started at 50-60%
        # and was at ~90% of the run's mean after 10 s, the rest of the ramp lasting tens of
        # seconds (lab/README.md). ~1 s per GiB of buffers, 3..20 s.
        o = replace(o, warm_s=max(3, min(20, round(3 + sb / (1 << 30)))))
    if not o.variants_given:
        o = gigantic_variant(o, sb, host, target)
    design, design_reason, phases = choose_design(o, target, sb, host.mem.available_kb)
    n = len(o.variants) - len([v for v in phases if host_wide(v)])  # servers side by side
    servers = 1 if design == "restart" or (o.instance and not o.copy) else n
    free = shutil.disk_usage(tempfile.gettempdir()).free
    need = disk_need(o.scale, per_mb, servers, target.wal_bytes)
    if copied is not None:
        # every server's copy, a quarter more for growth, WAL; a replay keeps one more
        # copy, the data as before the log (reset before every run)
        need = (servers + (1 if o.replay else 0)) * (copied * 5 // 4) + \
            servers * target.wal_bytes
        if need > free:
            raise InputError(f"{servers} cop{'ies' if servers > 1 else 'y'} of "
                             f"{fmt_bytes(copied)} of data" + (" and one kept for resets"
                                                               if o.replay else "") +
                             f" need{'' if servers > 1 or o.replay else 's'} "
                             f"~{fmt_bytes(need)} of disk in {tempfile.gettempdir()}, "
                             f"{fmt_bytes(free)} is free; set TMPDIR to a larger disk" +
                             (", or give --design restart (one server)" if servers > 1
                              else ""))
    if need > free and not scale_given and copied is None:
        # the default scale fills 3/4 of the buffers; where the disk cannot hold every
        # server's copy of that, the data shrinks to what it holds (said in the report)
        # rather than refusing the command a user typed without a scale
        fit = fitting_scale(free, per_mb, servers, target.wal_bytes)
        if fit >= MIN_SCALE_SHARE * o.scale:
            o = o.noted(f"{b.unit} {fit} instead of {o.scale}: {counted(servers, 'server')} "
                        f"with {fmt_bytes(sb)} of buffers would hold ~{fmt_bytes(need)} of "
                        f"data and WAL, {fmt_bytes(free)} is free in "
                        f"{tempfile.gettempdir()} (TMPDIR)", scale=fit)
            need = disk_need(o.scale, per_mb, servers, target.wal_bytes)
    if need > free:
        raise InputError(f"{counted(servers, 'server')} at scale {o.scale} need "
                         f"~{fmt_bytes(need)} of disk in {tempfile.gettempdir()}, {fmt_bytes(free)} is free; lower "
                         "--scale or --buffers" + (", or give --design restart (one server)"
                                                   if servers > 1 else ""))
    if o.clients is None:  # once the scale and the servers side by side are settled
        clients, why = clients_for(o, b, n if design == "simultaneous" else 1)
        o = o.noted(why, clients=clients)
    rounds_given = o.rounds is not None
    if o.rounds is None:
        o = replace(o, rounds=default_rounds(design, n, trades(o)))
    if o.rounds < 1:
        raise InputError(f"--rounds {o.rounds}: give at least 1")
    if o.swap_s is not None and not (math.isfinite(o.swap_s) and o.swap_s >= 0):
        raise InputError(f"--swap-seconds {o.swap_s}: give 0 (no swapping within a run) "
                         "or more")
    if o.run_s is None and o.replay:
        o = replace(o, run_s=MIN_RUN_S)  # until the unmeasured replay says (fixed.py)
    if o.run_s is None:
        per = run_seconds(o, design, n, phases)
        if per < MIN_RUN_S and phases and not o.variants_given:
            o, phases, n = drop_phases(o, design, n, phases, rounds_given)
            per = run_seconds(o, design, n, phases)
        if per < MIN_RUN_S:
            # fewer epochs of runs that say something, rather than runs that do not (3 s
            # runs on 16 CPUs: half-width 5% in 5 minutes); the interval shows the fewer
            # epochs, and the report says which budget holds min_blocks of them
            keeps = math.ceil(duration_for(o, design, n, phases, MIN_RUN_S) / 60)
            o = o.noted(f"runs of {MIN_RUN_S} s, the shortest that says something: "
                        f"{o.duration_s} s holds fewer than {o.min_blocks} epochs of them; "
                        f"--duration {keeps}m holds {o.min_blocks}")
        o = replace(o, run_s=planned_run_s(design, o.warm_s, per))
    if o.swap_s is None:
        # Simultaneous: pinned for a whole run, a run's ln ratio carried a level of its own
        # (sd ~0.06 between the rounds of one epoch, not the CPUs' lasting difference and
        # not the servers'), two thirds of an A/A's epoch variance; trading CPUs every
        # ~3 s within the run cut it to 0.007-0.019, twice what per-second noise predicts
        # at most (lab/README.md, "Trading CPUs within a run"). Pieces of
        # ~3 s: the per-second ratio's autocorrelation is gone after 2-3 s, and a trade
        # moves every thread of a server and its clients. The run is cut into a multiple
        # of n pieces, so each server spends equal time on every CPU group.
        o = replace(o, swap_s=swap_seconds(o.run_s, n) if design == "simultaneous" else 0)
    return o, engine, target, design, design_reason, phases, buffers_source


# Buffers from which the default run compares 1 GiB pages too: production sizes, where the
# profile's own choice of 1 GiB pages begins to matter (gigantic_min is 32 GiB in oltp) and a
# 1 GiB page wastes at most 1/16 of the buffers to rounding.
GIGANTIC_VARIANT_MIN = 16 << 30


def gigantic_variant(o: Options, buffers: int, host, target) -> Options:
    """The options with "hugepages-1g" added to the default variants where 1 GiB pages should
    be compared as well: the buffers are at production size, the CPU and kernel offer 1 GiB
    pages, and memory and disk hold one more server side by side at the default scale;
    else as they were (with the reason in dropped where only memory or disk kept it out)."""
    if buffers < GIGANTIC_VARIANT_MIN or "hugepages-1g" in map(kind, o.variants):
        return o
    if "pdpe1gb" not in host.cpu_flags or host.pool(GIB_KB) is None:
        return o
    servers = len([v for v in o.variants if not host_wide(v)]) + 1
    avail = (host.mem.available_kb or 0) * 1024
    per_mb = BENCHMARKS[o.bench].mb_per_unit
    if buffers * servers + (2 << 30) > avail:
        why = (f"{servers} servers with {fmt_bytes(buffers)} of buffers do not fit in "
               f"{fmt_bytes(avail)} of available memory")
    elif (need := disk_need(o.scale, per_mb, servers, target.wal_bytes)) > (
            free := shutil.disk_usage(tempfile.gettempdir()).free):
        why = (f"a third server needs disk: {servers} at scale {o.scale} take "
               f"~{fmt_bytes(need)}, {fmt_bytes(free)} is free in {tempfile.gettempdir()} "
               "(TMPDIR); give --variants current,hugepages-1g to compare it alone")
    else:
        return replace(o, variants=(*o.variants, "hugepages-1g"))
    return replace(o, dropped={**o.dropped, "hugepages-1g": why})


def drop_phases(o: Options, design: str, n: int, phases: list[str],
                rounds_given: bool) -> tuple[Options, list[str], int]:
    """The default THP phases double the epochs a budget must hold; where that would cut
    the runs below MIN_RUN_S (5 s with 8 GB in 4 minutes), they go, and the
    plan's comparison keeps runs long enough to say something. Returns the options without
    them, no phases, and the servers left side by side."""
    keeps = math.ceil(duration_for(o, design, n, phases, MIN_RUN_S) / 60)
    gone = [v for v in o.variants if host_wide(v)]
    why = (f"a budget of {o.duration_s} s holds too few epochs of {MIN_RUN_S} s runs with "
           f"THP phases; --duration {keeps}m keeps them")
    o = replace(o, variants=tuple(v for v in o.variants if v not in gone),
                dropped={**o.dropped, **{v: why for v in gone}})
    n = len(o.variants)
    if not rounds_given:
        o = replace(o, rounds=default_rounds(design, n, trades(o)))
    return o, [], n


def trades(o: Options) -> bool:
    """Whether simultaneous servers will trade CPUs within a run: pinned, and --swap-seconds
    not 0 (measure.py trades only pinned servers)."""
    return o.pin_cpus and o.swap_s != 0


def see(o: Options, engine, sr: SysRoot) -> Options:
    """The options with validate's one survey of the host (survey), taken before anything
    changes, of every engine as check reads it, with the journal validate was given: the
    engine's running instances in it (seen), the one --instance names (found) and the THP
    modes check recommends (thp_plan): what an engine's server is built from, and what the
    report's advice quotes, so that validate's words and check's never disagree. An
    --instance that names none: one line, with what the engine knows of a stopped one."""
    seen = survey(sr, o.profile, Targets(), None, journal=o.journal_dir)
    report = report_of(seen)
    want = plan_knobs(report)  # a knob the profile keeps is not in it: its value now
    modes = {f: want.get(KnobId.thp(f)) or knob_now(report.host, KnobId.thp(f))
             for f in THP_FILES}
    o = replace(o, survey=seen, seen=tuple(i for i in report.instances
                                           if i.running and i.engine == o.db),
                thp_plan=tuple((f, str(m)) for f, m in modes.items() if m))
    if not o.instance:
        return o
    try:
        return replace(o, found=select(report, [o.db], [o.instance])[0])
    except InputError:
        if stopped := engine.not_running(o.instance):
            raise InputError(f"{stopped}; start it, or leave out --instance to use a scratch "
                             "server") from None
        raise


def followed(o: Options, setting: str):
    """The running instance of the engine with the largest buffers (`setting`) among those
    validate saw (see()): what the user runs, whose buffers validate follows when none are
    given and whose binaries a scratch server runs. None when none runs."""
    sized = []
    for i in o.seen:
        if i.settings.get(setting):
            try:
                sized.append((parse_bytes(str(i.settings[setting]), setting), i))
            except InputError:
                continue
    return max(sized, key=lambda x: x[0])[1] if sized else None


def default_buffers(o: Options, target, host) -> tuple[str, str]:
    """The scratch server's buffers when none are given: those of the largest running
    instance of the engine on this host (what the user will run), capped so that the
    host keeps room for a second copy or a pool of the same size and 2 GiB besides."""
    setting = target.buffers_setting
    inst = followed(o, setting)
    if inst is None:
        return DEFAULT_BUFFERS, (f"the default: no running {o.db} instance to "
                                 "follow")
    size, iid = parse_bytes(str(inst.settings[setting]), setting), inst.id
    avail = (host.mem.available_kb or 0) * 1024
    spare = max(128 << 20, (avail - (2 << 30)) // 2) >> 27 << 27  # whole 128 MiB
    text = f"{max(128, min(size, spare) >> 20)}MB"
    if size > spare:
        return text, (f"{setting} of {iid} ({fmt_bytes(size)}), capped by the "
                      f"{fmt_bytes(avail)} of available memory")
    return text, f"follows {setting} of {iid}"
