"""A server that has exited is stopped, also while it waits as a zombie for a parent that
reaps it late (an init that reaps slowly, a container's PID 1 that never does): the pid file
readers and the stop loops take a zombie for gone, and never wait on it."""

import os
import subprocess
import sys
import time

from hpadvise.benchmarks.target import gone, wait_gone
from hpadvise.plugins.postgres.actions import read_pid

# a parent that starts a child which exits at once, prints its PID and never reaps it
PARENT = ("import subprocess, sys, time\n"
          "p = subprocess.Popen(['true'])\n"
          "print(p.pid, flush=True)\n"
          "time.sleep(60)\n")


def _zombie_of_another() -> tuple[subprocess.Popen, int]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return parent, pid
        time.sleep(0.01)
    raise AssertionError(f"{pid} never became a zombie")


def test_a_zombie_is_gone_and_no_postmaster(tmp_path):
    parent, pid = _zombie_of_another()
    try:
        assert os.path.exists(f"/proc/{pid}")  # still listed: not reaped
        assert gone(pid)
        t0 = time.monotonic()
        wait_gone(pid, 10)
        assert time.monotonic() - t0 < 1
        (tmp_path / "postmaster.pid").write_text(f"{pid}\n{tmp_path}\n")
        assert read_pid(str(tmp_path)) is None
        # a live process is neither gone nor missing from its pid file
        (tmp_path / "postmaster.pid").write_text(f"{parent.pid}\n{tmp_path}\n")
        assert not gone(parent.pid) and read_pid(str(tmp_path)) == parent.pid
    finally:
        parent.kill()
        parent.wait()
