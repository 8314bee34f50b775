"""How the suite shares the host between its two workers (tests/hostlock.py): which tests go
out as one unit of work, and the memory lock a guest beside the host's tests takes."""

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hostlock


@pytest.mark.parametrize("nodeid,unit", [
    ("tests/integration/test_pg_live.py::test_apply", "the host"),
    ("tests/integration/test_numa_guest.py::test_two_nodes_seen",
     "tests/integration/test_numa_guest.py"),
    ("tests/integration/test_numa_guest.py::test_short_node_under_a_cpuset",
     "tests/integration/test_numa_guest.py"),
    ("tests/unit/test_cli.py::test_help", "tests/unit/test_cli.py::test_help"),
    ("tests/integration/test_browser.py::test_report",
     "tests/integration/test_browser.py::test_report"),
])
def test_units_of_work(nodeid, unit):
    """The host's tests are one unit (one worker, file order); the two-node guest's module is
    one (its guest boots once); any other contained test is a unit of its own."""
    assert hostlock.scope(nodeid) == unit
    assert hostlock.contained(nodeid) == (unit != "the host")


def test_the_host_goes_out_first_and_the_guest_last():
    units = ["tests/unit/test_cli.py::test_help", "tests/integration/test_numa_guest.py",
             "the host", "tests/integration/test_python39.py::test_the_unit_tests_pass"]
    assert sorted(units, key=hostlock.rank) == [
        "the host", "tests/unit/test_cli.py::test_help",
        "tests/integration/test_python39.py::test_the_unit_tests_pass",
        "tests/integration/test_numa_guest.py"]


def _taken_elsewhere(path: str) -> bool:
    """Whether another process finds the lock at `path` held."""
    probe = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "except BlockingIOError:\n    sys.exit(1)\n")
    return subprocess.run([sys.executable, "-c", probe, path]).returncode == 1


def test_memory_is_held_from_the_first_ask_to_the_end_of_the_test(tmp_path, monkeypatch):
    """hold_memory takes the memory lock once however often it is asked, and release_memory
    (the host_lock fixture's teardown) lets it go."""
    lock = str(tmp_path / "memory.lock")
    monkeypatch.setattr(hostlock, "MEMORY_LOCK", lock)
    assert not _taken_elsewhere(lock)
    hostlock.hold_memory()
    hostlock.hold_memory()
    try:
        assert _taken_elsewhere(lock) and len(hostlock._memory) == 1
    finally:
        hostlock.release_memory()
    assert not _taken_elsewhere(lock) and not hostlock._memory


def test_a_guest_holding_memory_keeps_a_test_waiting(tmp_path, monkeypatch):
    """While another process holds the memory lock (the guest's run), hold_memory waits."""
    lock = str(tmp_path / "memory.lock")
    monkeypatch.setattr(hostlock, "MEMORY_LOCK", lock)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        waiter = subprocess.Popen([sys.executable, "-c", (
            "import sys; sys.path.insert(0, sys.argv[1]); import hostlock; "
            "hostlock.MEMORY_LOCK = sys.argv[2]; hostlock.hold_memory(); print('held')"),
            str(Path(hostlock.__file__).parent), lock], stdout=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            waiter.wait(timeout=1)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert waiter.communicate(timeout=30)[0].strip() == "held"
