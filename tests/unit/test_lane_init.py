"""tests/lane_init.py, the PID 1 of a test worker's own PID namespace: it runs its command,
exits as it did, passes on the signals it gets, and reaps the processes orphaned to it."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

INIT = str(Path(__file__).resolve().parents[1] / "lane_init.py")


def test_exits_as_its_command_did():
    assert subprocess.run([sys.executable, INIT, "sh", "-c", "exit 7"]).returncode == 7
    r = subprocess.run([sys.executable, INIT, "sh", "-c", "echo $HPADVISE_TESTS_LANE"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "1\n"  # the worker knows it is in its lane
    r = subprocess.run([sys.executable, INIT], capture_output=True, text=True)
    assert r.returncode == 2 and "give the command to run" in r.stderr


def test_a_signal_reaches_the_command():
    p = subprocess.Popen([sys.executable, INIT, "sleep", "30"])
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 128 + signal.SIGTERM


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="a PID namespace needs root and unshare (util-linux)")
def test_an_orphan_is_reaped_and_none_outlives_it(tmp_path):
    """A process orphaned in the namespace (as a server is when pg_ctl exits) leaves no zombie
    behind, and one still running when the command ends is killed with the namespace."""
    script = ("(sleep 0.2 &); (sleep 300 & echo $! > left); sleep 1; "
              "for p in /proc/[0-9]*; do [ \"$(cut -d' ' -f3 $p/stat 2>/dev/null)\" = Z ] "
              "&& echo zombie $p; done; exit 0")
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, INIT,
                        "sh", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and "zombie" not in r.stdout, r.stdout + r.stderr
    left = int((tmp_path / "left").read_text())  # its PID inside; outside, none is left
    out = subprocess.run(["pgrep", "-f", "^sleep 300$"], capture_output=True, text=True)
    assert left and out.stdout == "", out.stdout
