"""Fault injection for the tests: environment variables that kill hpadvise with SIGKILL at a
chosen point of an apply or a rollback (tests/integration/test_interruptions.py), so that a
journal cut anywhere is shown to roll back. Unset, they do nothing."""

from __future__ import annotations

import os


def after_step(n: int) -> None:
    """apply's step N is done: HPADVISE_TEST_KILL_AFTER=N kills it here."""
    kill_at("HPADVISE_TEST_KILL_AFTER", n)


def kill_later(name: str) -> None:
    """Fault injection for the tests: HPADVISE_TEST_KILL_IN_RESTART=SECONDS kills this process
    with SIGKILL that long after a restart began (while the server is stopping or starting;
    its pg_ctl or service manager carries on without us)."""
    k = os.environ.get(name)
    if k:
        import signal
        import threading
        t = threading.Timer(float(k), os.kill, (os.getpid(), signal.SIGKILL))
        t.daemon = True
        t.start()


def kill_at(name: str, n: int) -> None:
    """Fault injection for the tests: HPADVISE_TEST_KILL_AFTER=N kills this process with
    SIGKILL right after apply's (or capture's, or validate's) step N is done,
    HPADVISE_TEST_KILL_ROLLBACK_AFTER=N right after rollback restored change N. N:INT or
    N:TERM sends that signal instead, as a user's Ctrl-C or a service manager's stop would."""
    k = os.environ.get(name)
    if not k:
        return
    at, _, sig = k.partition(":")
    if at.isdigit() and int(at) == n:
        import signal
        os.kill(os.getpid(), getattr(signal, f"SIG{sig or 'KILL'}"))
