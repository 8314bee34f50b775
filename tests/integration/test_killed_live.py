"""capture and validate --replay killed at every step they journal, with SIGKILL, SIGINT and
SIGTERM (HPADVISE_TEST_KILL_AFTER=N:SIG), on real throwaway clusters: an interrupt puts back
all it changed itself; after a SIGKILL a second command over the same settings is refused in
one line naming the rollback, and that rollback puts the server's settings and files, the
host's knobs and the scratch servers' directories back as they were."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from support import end_validate, host_state, run_cli, scratch_dirs
from test_capture_safe import cluster, logging_state, own_dirs, settled
from test_validate_own import capture, shop

pytestmark = [pytest.mark.integration, pytest.mark.live]


def killed_at(step: int, sig: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """hpadvise run with SIG sent to it right after its journaled step `step`; SIGINT as at a
    terminal (a suite run as a background job inherits it ignored)."""
    return subprocess.run([sys.executable, "-m", "hpadvise.cli", *args], capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "HPADVISE_TEST_KILL_AFTER": f"{step}:{sig}"},
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def active(journal) -> list[dict]:
    h = run_cli("history", "--json", "--journal-dir", str(journal))
    return [j for j in json.loads(h.stdout or "[]") if not j["rolled_back"]]


def _pool_in_use() -> bool:
    m = {ln.split(":")[0]: int(ln.split()[1]) for ln in
         open("/proc/meminfo").read().splitlines() if ln.startswith("HugePages_")}
    return m["HugePages_Total"] - m["HugePages_Free"] + m["HugePages_Rsvd"] > 0


def top_level(c) -> set[str]:
    """The data directory's own entries: what a capture's leftovers would add to."""
    return set(os.listdir(c.datadir))


@pytest.mark.parametrize("sig", ["KILL", "INT", "TERM"])
def test_capture_killed_at_every_step(pg_factory, tmp_path, sig):
    c = cluster(pg_factory, collector=True)
    before, dirs, files = logging_state(c), own_dirs(), top_level(c)
    journal = tmp_path / "journal"
    common = ("--instance", c.datadir, "--no-base", "--journal-dir", str(journal))
    r = run_cli("capture", *common, "--duration", "1s", "--output", str(tmp_path / "whole"))
    assert r.returncode == 0, r.stderr
    [whole] = json.loads(run_cli("history", "--json", "--journal-dir", str(journal)).stdout)
    steps = whole["changes"]
    assert steps >= 8  # its log directory, the logging settings, two reloads
    for step in range(1, steps + 1):
        out = tmp_path / f"cap{step}"
        r = killed_at(step, sig, "capture", *common, "--duration", "30s", "--output", str(out))
        if sig == "KILL":
            assert r.returncode == -signal.SIGKILL, (step, r.stderr[-1500:])
            [left] = active(journal)
            changed = logging_state(c) != before
            again = run_cli("capture", *common, "--duration", "1s", "--output",
                            str(tmp_path / f"again{step}"))
            if changed:  # a setting the killed one holds: refused, nothing done
                errors = [ln for ln in again.stderr.splitlines()
                          if ln.startswith("hpadvise: error")]
                assert again.returncode == 2 and len(errors) == 1, (step, again.stderr)
                assert f"`hpadvise rollback {left['id']}`" in errors[0]
                assert not (tmp_path / f"again{step}").exists()
            else:  # only its own log directory made: nothing of the server's is stacked
                assert again.returncode == 0, (step, again.stderr)
            rb = run_cli("rollback", "--yes", "--journal-dir", str(journal))
            assert rb.returncode == 0, (step, rb.stdout, rb.stderr)
        else:
            assert r.returncode == 130, (step, r.stderr[-1500:])
            assert "capture interrupted" in r.stderr and "Traceback" not in r.stderr
        assert active(journal) == [], step
        assert settled(c, before) == before, step
        assert own_dirs() == dirs and top_level(c) == files, step
    # and a whole capture after them all
    r = run_cli("capture", *common, "--duration", "2s", "--output", str(tmp_path / "last"))
    assert r.returncode == 0, r.stderr
    assert settled(c, before) == before and active(journal) == []


def test_replay_killed_at_every_step(knobs, pg_factory, tmp_path):
    """validate --replay journals the host's knobs, then each scratch server's directory as
    it is made: killed after each of those steps (SIGKILL, SIGINT and SIGTERM in turn), and
    once with SIGKILL while the recommended variant runs on its pool."""
    c = shop(pg_factory, collector=True)
    out = tmp_path / "cap"
    capture(c, tmp_path, out, 2)
    src, src_pid, host, dirs = logging_state(c), c.pid, host_state(), scratch_dirs()
    journal = tmp_path / "journal"
    args = ("validate", "--replay", str(out), "--duration", "12s", "--variants",
            "current,recommended", "--journal-dir", str(journal))

    def after(what: str, r: subprocess.CompletedProcess | None) -> None:
        """Everything as before the kill, through a rollback where one was needed."""
        left = active(journal)
        if left:  # killed: refused until rolled back, then rolled back
            again = run_cli(*args)
            assert again.returncode == 2, (what, again.stderr[-1500:])
            assert f"`hpadvise rollback {left[-1]['id']}`" in again.stderr, what
            rb = run_cli("rollback", "--yes", "--journal-dir", str(journal), timeout=300)
            assert rb.returncode == 0, (what, rb.stdout, rb.stderr)
        elif r is not None:
            assert r.returncode == 130, (what, r.stderr[-1500:])
        assert active(journal) == [], what
        assert host_state() == host and scratch_dirs() == dirs, what
        assert logging_state(c) == src and c.pid == src_pid, what  # the source untouched

    step, finished = 0, None
    while finished is None:
        step += 1
        sig = ("KILL", "INT", "TERM")[step % 3]
        r = killed_at(step, sig, *args, timeout=600)
        if r.returncode == 0:  # the run has fewer journaled steps: it went through whole
            finished = step
            break
        assert r.returncode in (-signal.SIGKILL, 130), (step, sig, r.stderr[-1500:])
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr
        after(f"step {step} {sig}", r)
    assert finished > 7  # the baseline, its journal directory and the scratch servers
    after("a whole run", None)
    # SIGKILL while the recommended variant runs on its pool
    p = subprocess.Popen([sys.executable, "-m", "hpadvise.cli", *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and host_state() == host:
            time.sleep(0.2)
        assert host_state() != host, "validate never changed a knob"
        while time.time() < deadline and not _pool_in_use():
            time.sleep(0.1)  # until a scratch server has its pages (mapped or reserved)
        assert _pool_in_use(), "no scratch server ever ran on the pool"
        p.kill()
        p.wait()
        assert scratch_dirs() != dirs  # its scratch servers are left: the rollback's to stop
        after("SIGKILL while measuring", None)
    finally:
        end_validate(p, dirs)
    # and a second capture of the source after it all
    capture(c, tmp_path, tmp_path / "cap2", 1)
