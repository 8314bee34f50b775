"""Runs of a fixed amount of work (a replay of a captured log) in validate's designs.

A replay is not a time: each run replays the whole log, and its statements write, so every
run must start from the same data. The runner resets each server's data before every start
(BenchTarget.reset_data) and runs one round per epoch; the epoch is still the unit of the
comparison. Before the measured runs, the log is replayed once on the first server, unmeasured
(as a warm-up is): it tells how long a run takes (what the budget holds), and a log that does
not match its data (errors above the driver's share) is refused before anything is measured.
"""

from __future__ import annotations

import math

from hpadvise.errors import InputError

from .measure import RunOverrun, run_clients


def resets(driver) -> bool:
    """Whether the driver's runs need the data reset before each (a replay's do)."""
    return bool(getattr(driver, "resets", False))


def calibrate(v) -> None:
    """Replay once on the target, unmeasured: sets the runs' length from it, no warm-up, one
    round per epoch, and a grace for a slower variant. `v` is the Validation."""
    o, t, d = v.o, v.target, v.bench
    v._update(phase="replaying the log once, unmeasured (its length, its errors)")
    t.prewarm()
    run_s, warm_s = o.run_s, o.warm_s
    o.run_s, o.warm_s = o.duration_s, 0
    try:
        run_clients(o, v.sr, "not counted in the unmeasured replay", [(d, None, None)],
                    o.clients, [t.pid()], v._update)
    except RunOverrun:
        raise InputError(f"one replay of the log did not end within the whole budget of "
                         f"{o.duration_s} s (a log too long for it, or sessions that wait on "
                         "each other's row locks over and over: docs/validate.md): give a "
                         "longer --duration (three replays per variant at least) or a shorter "
                         "log") from None
    except RuntimeError as exc:  # the replay tool failed on this data (not our fault)
        raise InputError(f"the log does not replay on {t.label}: {exc}") from None
    finally:
        o.run_s, o.warm_s = run_s, warm_s
    took = d.last.seconds
    v.calibration = {"seconds": took, "statements": d.last.statements,
                     "errors": d.last.errors, "connections": d.last.connections}
    o.run_s, o.warm_s, o.rounds = max(1, math.ceil(took)), 0, 1
    # a variant may replay slower: a run ends when its replay does, bounded by twice the
    # unmeasured replay's time or a minute more, whichever is longer
    o.run_grace_s = max(o.run_grace_s, o.run_s)
    if v.design == "simultaneous":  # trades within a run, as options.check cuts them
        n = len(v.side_by_side)
        o.swap_s = o.run_s / (n * max(1, round(o.run_s / (3 * n))))
    t.stop()
    t.reset_data()
    t.restart()


def budget_note(v, n: int, phases: list[str]) -> None:
    """Where the budget holds fewer than min_blocks epochs of these runs, the report says
    which --duration holds them."""
    from .options import duration_for
    o = v.o
    need = duration_for(o, v.design, n, phases, o.run_s)
    if need > o.duration_s:
        o.default_notes.append(
            f"one replay takes {o.run_s} s: {o.duration_s} s holds fewer than {o.min_blocks} "
            f"epochs of them; --duration {math.ceil(need / 60)}m holds {o.min_blocks}")
