"""A scratch server's directory as a journaled change: what a validate killed before its own
cleanup leaves running and on disk, `rollback` stops and removes.

validate makes each scratch server (its data, socket and log) in a directory of its own and
journals it here as it is made: absent before, present while it runs. Restoring it stops the
server whose pid file is in it (with the signal its engine stops it at once by, then SIGKILL),
and removes the directory. Only directories validate names "hpadvise-..." are ever removed,
and only a process whose command line names the directory is signalled: a journal edited to
point elsewhere is refused before anything is restored, and a reused PID is left alone.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import time
from typing import Any

from ..facts.procs import exited
from .actions import ActionError, PathAction

PREFIX = "hpadvise-"
# How long a scratch server may take to stop at once before it is killed: an immediate
# shutdown of PostgreSQL, or MariaDB's on SIGTERM with nothing to flush, took seconds here.
STOP_S = 60


class ScratchDir(PathAction):
    kind = "scratch_dir"

    def __init__(self, path: str, pidfile: str = "", stop: str = "TERM"):
        super().__init__(path)
        self.pidfile, self.stop = pidfile, stop

    def spec(self) -> dict:
        return {"kind": self.kind, "path": self.path, "pidfile": self.pidfile,
                "stop": self.stop}

    @property
    def label(self) -> str:
        return f"scratch directory {self.path}"

    def get(self) -> str | None:
        return "present" if os.path.isdir(self.path) else None

    def set(self, value: str | None) -> None:
        if value == "present":
            return  # made by validate itself (benchmarks.target.owned_tmpdir)
        if self.invalid(value):
            raise ActionError(f"{self.path}: not a scratch directory of validate; left alone")
        pid = self._server()
        if pid:
            self._stop(pid)
        try:
            shutil.rmtree(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ActionError(f"cannot remove {self.path}: {exc.strerror}") from None

    def _server(self) -> int | None:
        """The server running from this directory: its pid file's PID, where that process's
        command line names the directory."""
        if not self.pidfile:
            return None
        try:
            with open(os.path.join(self.path, self.pidfile)) as f:
                pid = int(f.read().split()[0])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            return None
        return pid if self.path in argv else None

    def _stop(self, pid: int) -> None:
        for sig, wait in ((getattr(signal, f"SIG{self.stop}"), STOP_S), (signal.SIGKILL, 10)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.time() + wait
            while time.time() < deadline:
                if exited(pid):
                    return
                time.sleep(0.1)
        raise ActionError(f"the server of {self.path} (PID {pid}) did not stop; stop it and "
                          "roll back again")

    def invalid(self, value: Any) -> str | None:
        if value not in (None, "present"):
            return "is neither absent nor present"
        base = os.path.basename(os.path.normpath(self.path))
        if not os.path.isabs(self.path) or not base.startswith(PREFIX):
            return f"names {self.path}, not a scratch directory of validate"
        return None

    def describe(self, old, new) -> str:
        return (f"stop what runs from {self.path} and remove it" if new is None
                else f"scratch directory {self.path}")

    def shell(self, new: str | None) -> list[str]:
        return [] if new else [f"rm -rf {shlex.quote(self.path)}"]
