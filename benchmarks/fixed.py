"""Runs of a fixed amount of work (a replay of a captured log) in validate's designs.

A replay is not a time: each run replays the whole log, and its statements write, so every
run must start from the same data. The runner resets each server's data before every start
(BenchTarget.reset_data) and runs one round per epoch; the epoch is still the unit of the
comparison. Before the measured runs, the log is replayed once on the first server, unmeasured
(as a warm-up is): it tells how long a run takes and how long a server's reset, start and
prewarm take (what the budget holds), and a log that does not match its data (errors above
the driver's share) is refused before anything is measured. It ends at the whole budget; a
log whose logged pace at the given speed cannot fit in it is refused before it starts.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from hpadvise.api.face import InputError

from .budget import swap_seconds
from .measure import RunOverrun, run_clients


def calibrate(v) -> None:
    """Replay once on the target, unmeasured: sets the runs' length from it, no warm-up, one
    round per epoch, and a grace for a slower variant; and what a server's reset, start and
    prewarm cost an epoch (start_s), timed on the way: `v.o` becomes a new Options with
    them. `v` is the Validation."""
    o, t, d = v.o, v.target, v.bench
    refuse_unfit(o, d)
    v._update(phase=UNMEASURED)
    began = time.monotonic()
    t.prewarm()
    prewarm_s = time.monotonic() - began
    # the unmeasured replay ends at the whole budget, no grace beyond it
    whole = replace(o, run_s=o.duration_s, warm_s=0, run_grace_s=0)
    try:
        run_clients(whole, v.sr, "not counted in the unmeasured replay", [(d, None, None)],
                    o.clients, [t.pid()], unmeasured(v._update), probe_speed=False)
    except RunOverrun:
        raise InputError(f"one replay of the log did not end within the whole budget of "
                         f"{o.duration_s} s (a log too long for it, or sessions that wait on "
                         "each other's row locks over and over: docs/validate.md): give a "
                         "longer --duration (three replays per variant at least) or a shorter "
                         "log") from None
    except RuntimeError as exc:  # the replay tool failed on this data (not our fault)
        raise InputError(f"the log does not replay on {t.label}: {exc}") from None
    took = d.last.seconds
    v.calibration = {"seconds": took, "statements": d.last.statements,
                     "errors": d.last.errors, "connections": d.last.connections}
    run_s = max(1, math.ceil(took))
    # a variant may replay slower: a run ends when its replay does, bounded by twice the
    # unmeasured replay's time or a minute more, whichever is longer; side by side, trades
    # within a run as options.check cuts them
    o = replace(o, run_s=run_s, warm_s=0, rounds=1, run_grace_s=max(o.run_grace_s, run_s),
                swap_s=swap_seconds(run_s, len(v.side_by_side))
                if v.design == "simultaneous" else o.swap_s)
    began = time.monotonic()
    t.stop()
    t.reset_data()
    t.restart()
    # every epoch resets, starts and prewarms each server as this one just was: the budget
    # note counts with that, not with a generated load's estimate (budget.START_S)
    v.o = replace(o, start_s=round(time.monotonic() - began + prewarm_s, 1))
    v.calibration["start_s"] = v.o.start_s


# What the progress says while the log replays once before the runs: nothing is measured.
UNMEASURED = "replaying the log once, unmeasured (its length, its errors)"


def unmeasured(update):
    """The progress callback for the unmeasured replay: run_clients' "warm-up" and
    "measuring" phases are a measured run's, so the phase stays UNMEASURED."""
    def said(**kw):
        if "phase" in kw:
            kw["phase"] = UNMEASURED
        update(**kw)
    return said


def refuse_unfit(o, d) -> None:
    """A replay at a given speed factor takes at least the log's own span divided by it
    (pgreplay keeps the logged pace over it): where that exceeds the whole budget, no run can
    end in it, said before anything is replayed."""
    span, speed = getattr(d, "span_s", None), getattr(d, "speed", None)
    if not span or not speed or span / speed <= o.duration_s:
        return
    least = math.ceil(span / speed)
    raise InputError(f"one replay of this log at speed factor {speed:g} takes at least "
                     f"{least} s (its {span:.0f} s at the logged pace), more than the whole "
                     f"budget of {o.duration_s} s: give a longer --duration (three replays per "
                     "variant at least) or a higher --replay-speed")


def budget_note(v, n: int, phases: list[str]) -> None:
    """Where the budget holds fewer than min_blocks epochs of these runs (with THP phases,
    min_blocks cycles: one epoch in each phase), the report says which --duration holds
    them; counted as the runner runs them: one round per epoch, each server reset, started
    and prewarmed in it for the time the unmeasured replay's server took (o.start_s)."""
    from .budget import duration_for, start_seconds
    o = v.o
    need = duration_for(o, v.design, n, phases, o.run_s)
    if need > o.duration_s:
        what = (f"{o.min_blocks} cycles (an epoch in each of its {len(phases)} THP phases: "
                f"{o.min_blocks * len(phases)} epochs)" if phases
                else f"{o.min_blocks} epochs")
        v.o = o.noted(
            f"one replay takes {o.run_s} s and a server's reset, start and prewarm "
            f"{start_seconds(o):g} s: {o.duration_s} s holds fewer than {what}; --duration "
            f"{math.ceil(need / 60)}m holds them")
