"""A replay's budget, the parts that need no server: the unmeasured replay (fixed.calibrate)
with pgreplay's own report standing in for pgreplay, what it times, how it ends and what its
progress says, and the report's note on the epochs a budget holds, counted as the runner
counts them."""

import math
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpadvise.benchmarks import fixed
from hpadvise.benchmarks.drivers import BENCHMARKS
from hpadvise.benchmarks.budget import duration_for
from hpadvise.benchmarks.options import Options
from hpadvise.kit.errors import InputError
from hpadvise.plugins.postgres.validate.replay import REPLAY_FASTEST, Replay
from hpadvise.facts.sysroot import SysRoot

REPORT = Path(__file__).resolve().parent.parent / "fixtures" / "pgreplay" / "replay-pg15.txt"
STEP_S = 0.05  # each step of the fake server: prewarm, stop, reset, start


class FakeReplay(Replay):
    """The real driver, its pgreplay a Python that prints a real replay's report (5.539 s)
    after `sleep_s`."""

    def __init__(self, sleep_s=0.0, span_s=20.0, speed=REPLAY_FASTEST):
        super().__init__("pgreplay", "statements.replay", "/tmp", 5432, speed)
        self.sleep_s, self.span_s = sleep_s, span_s

    def command(self):
        return [sys.executable, "-c", f"import time, sys; time.sleep({self.sleep_s}); "
                f"sys.stdout.write(open({str(REPORT)!r}).read())"]


class FakeServer:
    label = "copy of the base backup"

    def __init__(self):
        self.calls = []

    def _step(self, name):
        self.calls.append(name)
        time.sleep(STEP_S)

    def prewarm(self):
        self._step("prewarm")

    def stop(self):
        self._step("stop")

    def reset_data(self):
        self._step("reset_data")

    def restart(self):
        self._step("restart")

    def pid(self):
        return None


def validation(hosts, driver, duration_s=120, design="restart"):
    o = Options(variants=["current", "recommended"], duration_s=duration_s, db="postgres",
                bench="replay", workload="replay", clients=1, run_s=10, warm_s=0)
    said = []
    v = SimpleNamespace(o=o, target=FakeServer(), bench=driver,
                        sr=SysRoot(str(hosts / "thp-always")), design=design,
                        side_by_side=o.variants, calibration=None,
                        _update=lambda **kw: said.append(kw))
    return v, said


def test_the_unmeasured_replay_times_the_run_and_a_servers_start(hosts):
    v, said = validation(hosts, FakeReplay())
    fixed.calibrate(v)
    o = v.o
    # its progress is the unmeasured replay's throughout, never a measured run's phases
    phases = [kw["phase"] for kw in said if "phase" in kw]
    assert phases and set(phases) == {fixed.UNMEASURED}
    assert (o.run_s, o.warm_s, o.rounds) == (math.ceil(5.539), 0, 1)
    assert o.run_grace_s == 60  # the measured runs' grace is back
    # prewarm, stop, reset and start as every epoch does them, timed
    assert v.target.calls == ["prewarm", "stop", "reset_data", "restart"]
    assert 4 * STEP_S <= o.start_s < 4 * STEP_S + 2
    assert v.calibration["start_s"] == o.start_s and v.calibration["statements"] == 79407


def test_the_unmeasured_replay_ends_at_the_whole_budget(hosts):
    v, said = validation(hosts, FakeReplay(sleep_s=60), duration_s=1)
    began = time.monotonic()
    with pytest.raises(InputError, match="did not end within the whole budget of 1 s"):
        fixed.calibrate(v)
    assert time.monotonic() - began < 15  # not the budget and the measured runs' minute
    assert (v.o.run_s, v.o.warm_s, v.o.run_grace_s) == (10, 0, 60)  # as they were


def test_a_log_whose_pace_outlasts_the_budget_is_refused_before_it_replays(hosts):
    v, _ = validation(hosts, FakeReplay(span_s=600, speed=1.0), duration_s=120)
    with pytest.raises(InputError, match=r"at least 600 s .* whole budget of 120 s"):
        fixed.calibrate(v)
    assert v.target.calls == []  # nothing prewarmed, nothing replayed
    # at twice the pace it fits; as fast as the server goes, the span says nothing
    fixed.refuse_unfit(v.o, FakeReplay(span_s=200, speed=2.0))
    fixed.refuse_unfit(v.o, FakeReplay(span_s=1e6))


@pytest.mark.parametrize("design,rounds", [("simultaneous", 1), ("resident", 1),
                                           ("restart", None)])
@pytest.mark.parametrize("phases", [[], ["thp-never", "thp-always"]])
@pytest.mark.parametrize("start_s", [1.5, 5.7, 12.0, 20.0])
def test_the_budget_note_agrees_with_the_epochs_the_runner_runs(design, rounds, phases,
                                                                start_s):
    """The runner runs epochs while the budget left holds one more (Validation._done): the
    note appears exactly where fewer than min_blocks epochs (cycles with THP phases) fit,
    with the start a server took in the unmeasured replay."""
    o = Options(variants=["current", "recommended"], duration_s=120, db="postgres",
                bench="replay", run_s=2, warm_s=0, rounds=rounds, start_s=start_s)
    v = SimpleNamespace(o=o, design=design)
    fixed.budget_note(v, 2, phases)
    assert o.default_notes == ()  # the note is on a new value
    o = v.o
    epoch = (2 * (o.run_s + start_s) if design == "restart"
             else 2 * start_s + (1 if design == "simultaneous" else 2) * o.run_s)
    held = math.floor(o.duration_s / epoch)
    wanted = o.min_blocks * max(1, len(phases))
    assert bool(o.default_notes) == (held < wanted), (epoch, held, o.default_notes)
    if o.default_notes:
        [note] = o.default_notes
        assert f"{o.duration_s} s holds fewer than {o.min_blocks} " in note
        assert (f"{wanted} epochs)" in note) == bool(phases)
        minutes = math.ceil(duration_for(o, design, 2, phases, o.run_s) / 60)
        assert note.endswith(f"--duration {minutes}m holds them")
        assert math.floor(minutes * 60 / epoch) >= wanted


def test_the_measured_start_is_what_the_note_counts_with():
    """cap2 with the default variants in 2 minutes: 2 s replays and starts of ~5 s hold 9
    epochs, and no note says they do not (the estimate for generated data, 12 s a start,
    did)."""
    o = Options(variants=["current", "recommended"], duration_s=120, db="postgres",
                bench="replay", run_s=2, warm_s=0, rounds=1, start_s=5.0)
    v = SimpleNamespace(o=o, design="simultaneous")
    fixed.budget_note(v, 2, ["thp-never", "thp-always"])
    assert v.o.default_notes == ()


def test_progress_names_what_is_loaded():
    assert BENCHMARKS["replay"].loading(0) == \
        "parsing the statement log for pgreplay (its replay file)"
    assert BENCHMARKS["pgbench"].loading(0) == "preparing pgbench on the copied data"
    assert BENCHMARKS["tpcc"].loading(0) == "preparing tpcc on the copied data"
    assert BENCHMARKS["pgbench"].loading(50) == "loading pgbench data (scale 50)"
    for b in BENCHMARKS.values():
        assert "( " not in b.loading(0) and " 0)" not in b.loading(0)
