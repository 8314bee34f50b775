"""validate on the user's own workload and data: `--script FILE` (a pgbench script or a
sysbench Lua script run as the built-in workloads are), `--copy` (the scratch servers are
copies of the running instance `--instance` names) and `--replay LOG|DIR` (a captured
statement log replayed on copies of the data it ran on). Checked here before anything
changes; what was measured is said in the report (origins)."""

from __future__ import annotations

import hashlib
import math
import os
import stat
from dataclasses import replace

from hpadvise.api.face import InputError

# How much of a script a report shows of it: its name and hash identify it; the text is the
# user's and may hold anything.
HASH_CHARS = 12


def file_hash(path: str, what: str) -> str:
    """sha256 of a regular, readable, non-empty file (the start of it, HASH_CHARS), or one
    line of bad input."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(f"{what} {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {path}: not a regular file")
    if st.st_size == 0:
        raise InputError(f"{what} {path}: the file is empty")
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        raise InputError(f"{what} {path}: {exc.strerror}") from None
    return h.hexdigest()[:HASH_CHARS]


def check_own(o):
    """The user's workload and data options, checked together (Options fields script, copy,
    replay, replay_speed, database): returns the options with a replay's bench, the files'
    hashes and their absolute paths."""
    if o.script and o.replay:
        raise InputError("--script and --replay exclude each other: a run measures one "
                         "workload")
    if (o.script or o.replay) and o.workload:
        raise InputError("--workload names a built-in workload; --script and --replay "
                         "bring their own: leave out --workload")
    if o.copy and not o.instance:
        raise InputError("--copy copies a running instance: name it with --instance ID")
    if o.copy and o.allow_restart:
        raise InputError("--copy measures copies and never restarts --instance: leave out "
                         "--allow-restart")
    if o.copy and not (o.script or o.replay):
        raise InputError(f"--copy holds your data, not {o.bench or 'the benchmark'}'s tables: "
                         "add --script FILE (your statements) or --replay LOG (a captured "
                         "log)")
    if o.database and not (o.copy or o.replay):
        raise InputError("--database picks a database of the copied data: it needs --copy "
                         "or --replay")
    if (o.copy or o.replay) and o.scale is not None:
        raise InputError("--scale sizes generated data; a copy holds the instance's own: "
                         "leave out --scale")
    if o.replay_speed is not None and not o.replay:
        raise InputError("--replay-speed is the speed of a --replay: it needs --replay")
    if o.replay_speed is not None and not (math.isfinite(o.replay_speed)
                                           and o.replay_speed > 0):
        raise InputError(f"--replay-speed {o.replay_speed}: give a factor above 0 (1 is the "
                         "logged pace)")
    if o.replay:
        if o.bench not in ("", "replay"):
            raise InputError(f"--bench {o.bench} and --replay exclude each other: the "
                             "replay is the workload")
        o = replace(o, bench="replay", replay=os.path.abspath(o.replay),
                    replay_hash=None if os.path.isdir(o.replay)
                    else file_hash(o.replay, "--replay"))
    if o.script:
        o = replace(o, script_hash=file_hash(o.script, "--script"),
                    script=os.path.abspath(o.script))
    if o.replay and o.instance and not o.copy:
        raise InputError("--replay writes: it runs on copies only; add --copy to replay on a "
                         f"copy of {o.instance}")
    return o


def origins(o, target, driver) -> dict:
    """What was measured, for the report: the workload's origin and the data's."""
    if o.replay:
        span = getattr(driver, "span_s", None)
        workload = (f"replay of {driver.statements:,} statements"
                    + (f" over {span / 60:.1f} minutes" if span else "")
                    + f" from {getattr(driver, 'log', o.replay)}"
                    + (f" (sha256 {o.replay_hash})" if getattr(o, "replay_hash", None) else "")
                    + f", at speed factor {driver.speed:g} with idle time skipped (pgreplay "
                      "-s, -j)")
    elif o.script:
        workload = f"script {o.script} (sha256 {o.script_hash}) run by {o.bench}"
    else:
        workload = f"built-in: {o.bench} {o.workload}"
    source = getattr(target, "source", None)
    data = (source.origin if source is not None
            else f"generated by {o.bench} at {target_unit(o)} {o.scale}")
    return {"workload_origin": workload, "data_origin": data}


def target_unit(o) -> str:
    from .drivers import BENCHMARKS
    return BENCHMARKS[o.bench].unit
