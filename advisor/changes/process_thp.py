"""A server's own THP mode as a journaled change: made by restarting it in that mode
(thp_exec.py: prctl before exec, kept by the server and its children), read back from /proc,
undone by restarting it in the mode it had.

The engine's restart does the work (its service manager is bypassed only where it always
is: pg_ctl, a server hpadvise starts itself); this action carries the mode into it
("thp_mode" in the restart's spec, which numa.keep_of turns into the prctl). A server whose
restart goes through systemd does not get the mode that way: its unit's MemoryTHP= does,
written by apply as a step before this restart (unit_thp.py).
"""

from __future__ import annotations

from typing import Any

from .actions import Restart
from ..facts.procs import start_time


class ProcessThp(Restart):
    kind = "process_thp"

    def __init__(self, inner: Restart, pages: bool = True):
        super().__init__(restart=inner.spec(), pages=pages)
        self.inner = inner
        self.instance = inner.instance
        self.order = getattr(inner, "order", 0)

    def spec(self) -> dict:
        # pages: the restart also puts the server on huge pages (its own verify applies);
        # rebuilt by engines.action_from_spec, which knows the engines' restarts
        return {"kind": self.kind, "restart": self.s["restart"], "pages": self.s["pages"]}

    def _inner(self, mode: str | None) -> Restart:
        """The engine's restart, starting the server in THP mode `mode` (None: as it runs)."""
        return type(self.inner).from_spec({**self.s["restart"], "thp_mode": mode})

    @property
    def label(self) -> str:
        return f"restart {self.instance or 'the server'} in its own THP mode"

    def get(self) -> str | None:
        from ..facts.numa import mode_of
        pid = self._inner(None).pid()
        return mode_of(pid) if pid else None

    def set(self, value: Any = None) -> None:
        self._inner(value).set(True)

    def restore(self, old: Any = None) -> None:
        # the mode it had; "inherit" where it could not be told (the host gave unadvised
        # memory no THP then: the two modes differed in nothing)
        self._inner(old or "inherit").set(True)

    def preflight(self) -> None:
        self._inner(None).preflight()

    def running(self) -> bool | None:
        return self._inner(None).running()

    def pid(self) -> int | None:
        return self._inner(None).pid()

    def verify(self, value: Any = None) -> tuple[bool, Any]:
        inner = self._inner(value)
        ok, what = inner.verify(True) if self.s["pages"] else (
            inner.running() is not False, "" if inner.running() is not False else "not running")
        now = self.get()
        if now is not None and now != value:
            return False, (f"it runs in THP mode {now}, not {value} (a restart through a "
                           f"service manager does not pass the mode on: {how(value)})")
        if not ok:
            return False, what
        # which process was started in it: check reads the mode back from here where /proc
        # cannot tell it (recorded_modes)
        pid = inner.pid()
        return True, {"mode": value, "pid": pid, "started": start_time(pid), "seen": now,
                      "note": what}

    def restored(self, old: Any = None) -> str | None:
        why = self._inner(old).restored(old)
        now = self.get()
        if why is None and old is not None and now is not None and now != old:
            return f"it runs in THP mode {now}, not {old}"
        return why

    def invalid(self, value: Any) -> str | None:
        from ..facts.thp_exec import MODES
        return None if value is None or value in MODES else f"is no THP mode ({value!r})"

    def describe(self, old, new) -> str:
        # None: a mode /proc could not tell, which a rollback restarts in as "inherit"
        return (f"restart {self.instance or 'the server'} in THP mode {new or 'inherit'}"
                + (f" (from {old})" if old and old != new else ""))

    def shell(self, new: Any = None) -> list[str]:
        return self._inner(new).shell(True)


def how(mode: str) -> str:
    """How a server hpadvise cannot restart gets THP mode `mode` at its next start."""
    from ..facts.thp_exec import SYSTEMD
    return (f"start it under `hpadvise thp-exec --mode {mode} -- COMMAND` (its start command), "
            f"or, as a systemd unit, with MemoryTHP={SYSTEMD[mode]} in a drop-in")

