"""validate's time and disk budgets: how long each measured run may be within --duration,
what a server start costs an epoch, how many clients by default, and how much disk the
scratch servers take (their inverses too, for the messages that say what would fit)."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .options import Options


# The shortest run the default budget plans: shorter windows were dominated by this VM's
# few-second dips (sd of the block ln-ratio 0.06-0.07 at 10-20 s, 0.05 at 25-30 s, far more
# at 3 s; lab/README.md).
MIN_RUN_S = 10


# The longest: 30 s, or 15 s side by side where the buffers are small enough that the warm-up
# is at its 3 s floor (under half a GiB), where a restart costs about a second. There, what
# moves an epoch's ratio at 128MB is mostly a level each start carries, flat through the
# epoch (sd 0.9-3.3% against 0.4-1.2% from what moves within 30 s, ten runs), so an epoch's
# variance hardly shrinks with its length and more starts narrow the interval: 10 minutes
# of 15 s runs hold 31 epochs instead of 17, whose starts carried the same levels (0.75%
# and 2.8% in two runs), which the variance components of all the runs put at an interval
# about a quarter narrower at the same noise (the two runs came out 0.31% and 1.12% wide,
# the eleven of 30 s around them 0.43-1.44%: the host's moment moved the widths more than
# three runs could tell; lab/README.md, "Ten runs back to back with the probe"). Larger
# buffers keep 30 s: a start there costs 12 s and more a server and the 4 KiB ramp lasts
# tens of seconds, which a shorter run would weigh more (not measured shorter); so do the
# designs that restart one server a run.
RUN_MAX_S = 30
RUN_MAX_S_SMALL = 15
SMALL_WARM_S = 3


def run_max_s(design: str, warm_s: int) -> int:
    """The longest run the default budget plans in `design` with a warm-up of warm_s
    (RUN_MAX_S's note)."""
    small = design == "simultaneous" and warm_s <= SMALL_WARM_S
    return RUN_MAX_S_SMALL if small else RUN_MAX_S


def planned_run_s(design: str, warm_s: int, per: float) -> int:
    """The run the default budget plans where `per` seconds a run would fill --duration:
    never shorter than MIN_RUN_S, never longer than run_max_s."""
    return max(MIN_RUN_S, min(run_max_s(design, warm_s), int(per)))


# Seconds of stop, start and prewarm per server start that run_seconds budgets for, at least:
# 11-13 s a server at 8 GB on 2 CPUs (lab/epoch_restart.py, fast stops), which the
# default-command runs at 128MB-8GB were planned with.
START_S = 12


# ... or per GiB of buffers, where that is more: the stop's checkpoint writes what an epoch
# of TPC-B dirtied (4 GB in 60 s at 8 GB here) and the prewarm reads the data back; 12 s at
# 8 GB is 1.5 s a GiB. On the 16-CPU host an epoch's restarts took 106-123 s for two servers
# of 24 GB (immediate stops, one server after the other: ~55 s a server; lab/README.md).
START_S_PER_GIB = 1.5


def default_rounds(design: str, n: int, trades: bool) -> int:
    """Runs of every variant per epoch when --rounds is not given.

    Simultaneous, the servers trading CPUs within each run (`trades`): one. Each run already
    spends equal time on every CPU group, and what is left between the servers is mostly a
    level each start carries: at 128MB on a quiet evening the two rounds of one epoch
    differed by sd 0.35-0.54% where starts added 1.5-1.6%, and in each of 18 recorded
    two-round runs (128MB to 8 GB, 5 to 60 minutes) one round per epoch projects an interval
    as narrow or narrower in the same time (lab/README.md, "One round per epoch"). A second
    round narrows the epoch's mean by little, where a second start halves the variance the
    interval carries. Simultaneous without trading: one round per server, so each starts
    once on every CPU group (variants.group_of). Resident: two, ABBA within the epoch."""
    if design == "simultaneous":
        return 1 if trades else n
    return 2


def swap_seconds(run_s: float, n: int) -> float:
    """The simultaneous design's trading period: `run_s` cut into a multiple of n pieces of
    about 3 s (options.check's comment says why), so each server spends equal time on every
    CPU."""
    return run_s / (n * max(1, round(run_s / (3 * n))))


def start_seconds(o: Options) -> float:
    """The seconds one server start costs an epoch (o.start_s, set by check from the
    buffers; START_S before that)."""
    return o.start_s if o.start_s is not None else START_S


def run_seconds(o: Options, design: str, n: int, phases: list[str]) -> float:
    """The measured seconds of one run that let the budget hold min_blocks epochs (with
    THP phases, min_blocks whole cycles: one epoch per phase), with ~START_S of restart and
    prewarm per server start."""
    epoch = o.duration_s / (o.min_blocks * max(1, len(phases)))
    if design == "restart":
        return epoch / n - start_seconds(o) - o.warm_s
    runs = o.rounds * (1 if design == "simultaneous" else n)
    return (epoch - start_seconds(o) * n) / runs - o.warm_s


def duration_for(o: Options, design: str, n: int, phases: list[str], run_s: float) -> int:
    """The budget in seconds at which run_seconds gives `run_s`: its inverse."""
    if design == "restart":
        epoch = n * (run_s + start_seconds(o) + o.warm_s)
    else:
        runs = o.rounds * (1 if design == "simultaneous" else n)
        epoch = start_seconds(o) * n + runs * (run_s + o.warm_s)
    return math.ceil(epoch * o.min_blocks * max(1, len(phases)))


def default_clients() -> tuple[int, str]:
    """Clients when --clients is not given: two per CPU this process may use, at least 16
    (the default on 2 CPUs, where lab/README.md's runs were made). Side by side they are
    shared out among the servers, each on its own CPUs: 16 clients on 16 CPUs left each
    server 8 clients for 8 CPUs, below what keeps a CPU busy while a client waits for its
    round trip. Returns the number and the reason, for the report."""
    cpus = len(os.sched_getaffinity(0))
    n = max(16, 2 * cpus)
    return n, f"{n} clients: 2 per CPU of the {cpus} this process may use, at least 16"


def clients_for(o: Options, bench, servers: int) -> tuple[int, str]:
    """The default clients (default_clients), but no more a server than the rows that its
    workload's transactions all update serve (Benchmark.contended) at o.scale: beyond them
    the clients mostly wait for each other's row locks, and the runs measure that queue
    (pgbench's documentation, "Good Practices"). `servers`: how many run at once, sharing
    the clients. A user's own script or data is not capped. Returns the number and the
    reason, for the report."""
    n, why = default_clients()
    cap = {w: (k, rows) for w, k, rows in bench.contended}.get(o.workload)
    if cap is None or o.script or o.scale < 1 or n <= o.scale * cap[0] * servers:
        return n, why
    each = o.scale * cap[0]
    most = each * servers
    return most, (f"{most} clients" + (f", {each} a server" if servers > 1 else "") +
                  f": at {bench.unit} {o.scale} more would queue on {cap[1]} "
                  f"(instead of {n}: 2 per CPU, at least 16)")


# The smallest share of the default scale validate shrinks the data to on a small disk;
# below it the data would no longer stand for the buffers and the command is refused.
MIN_SCALE_SHARE = 0.25


def disk_need(scale: int, per_mb: int, servers: int, wal_bytes: int) -> int:
    """Disk for `servers` scratch servers: tables and indexes (a copy of the first for the
    others) with a quarter more for growth during the runs, and WAL up to max_wal_size."""
    return servers * ((scale * per_mb << 20) * 5 // 4 + wal_bytes)


def fitting_scale(free: int, per_mb: int, servers: int, wal_bytes: int) -> int:
    """The largest scale whose servers fit in `free` bytes of disk (disk_need's inverse),
    keeping a tenth of it free."""
    each = free * 9 // 10 // max(1, servers) - wal_bytes
    return max(0, each * 4 // 5 // (per_mb << 20))
