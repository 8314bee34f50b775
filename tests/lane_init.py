"""PID 1 of a test worker's own PID namespace.

scripts/test.sh starts each pytest-xdist worker as
`unshare --pid --fork --mount-proc PYTHON tests/lane_init.py PYTHON -u -c ...`: each worker
sees only the processes it starts (a `check` in one worker never meets the servers or guests
of the other), under a /proc of its own. This process is the namespace's init: it runs the
worker as its child, passes on the signals it is sent, reaps every process orphaned into the
namespace (a server that pg_ctl or mysqld_safe started becomes its child when they exit, and
a zombie would keep its /proc entry, so a wait for the server to be gone would not end), and
exits as the worker did. When it exits, the kernel kills whatever is left in the namespace
(pid_namespaces(7)), so no server of a worker outlives it.
"""

from __future__ import annotations

import os
import signal
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)


def main(argv: list[str]) -> int:
    if not argv:
        print("lane_init.py: give the command to run, e.g. lane_init.py python -m pytest",
              file=sys.stderr)
        return 2
    child = {"pid": 0}

    def forward(sig, _frame):
        if child["pid"]:
            os.kill(child["pid"], sig)

    for sig in FORWARDED:  # set before the fork: exec resets them in the child
        signal.signal(sig, forward)
    pid = os.fork()
    if pid == 0:
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        os.environ["HPADVISE_TESTS_LANE"] = "1"  # hostlock.LANE: the worker knows its lane
        os.execvp(argv[0], argv)
    child["pid"] = pid
    # the worker talks to pytest-xdist over stdin and stdout: hold no copy of them here, so
    # its end is seen as soon as it exits
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:  # cannot happen while the worker runs; ends the loop
            return 1
        if done == pid:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
