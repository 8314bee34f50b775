"""A server in its root with its ids shifted by a user namespace (tests/userns.py: root stays
root, every other id n is the host's 100000 + n), as userns-remapped container runtimes run
it: the root's `mysql`, uid 999 inside, is the host's uid 100999, which the host's passwd does
not name. Everything else is RootServer's; the server's own directories are owned by the
shifted ids on the host, and commands run inside enter its user namespace too."""

from __future__ import annotations

import sys
from pathlib import Path

from roots import RootServer
from userns import shift_owners

HELPER = str(Path(__file__).resolve().parent / "userns.py")


class UsernsRoot(RootServer):
    def _init_datadir(self) -> None:
        # the server's own directories, removed with it: nothing to give back
        shift_owners(self.host(self.dir), Path(self.tmp, "run"))
        super()._init_datadir()

    def _enter(self, argv: list[str], as_user: bool = True, init: str | None = None
               ) -> list[str]:
        return [sys.executable, HELPER, *super()._enter(argv, as_user, init)]

    def _init_pid(self) -> int | None:
        """The namespace's PID 1: the child of unshare, which is the helper's child."""
        unshare = super()._init_pid()
        try:
            kids = Path(f"/proc/{unshare}/task/{unshare}/children").read_text().split()
        except (OSError, TypeError):
            return None
        return int(kids[0]) if kids else None

    def exec_argv(self, argv: list[str], user: bool = False) -> list[str]:
        base = super().exec_argv(argv, user)  # nsenter ...: into its user namespace too
        return [base[0], "-U", *base[1:]]
