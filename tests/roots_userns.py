"""A server in its root with its ids shifted by a user namespace, as rootless and userns-remapped
container runtimes run it: root stays root (uid_map "0 0 1"), and every other id n of the root
is the host's SHIFT + n ("1 100001 65535"), so the root's `mysql`, uid 999 inside, is the
host's uid 100999, which the host's passwd does not name. Everything else is RootServer's; the
server's own directories are owned by the shifted ids on the host."""

from __future__ import annotations

import os
from pathlib import Path

from roots import RootServer

SHIFT = 100000


class UsernsRoot(RootServer):
    def _shift(self, path: Path) -> None:
        for p in [path, *path.rglob("*")]:
            st = os.lstat(p)
            if 0 < st.st_uid < SHIFT:
                os.lchown(p, SHIFT + st.st_uid, SHIFT + st.st_gid if st.st_gid else 0)

    def _init_datadir(self) -> None:
        self._shift(self.host(self.dir))
        self._shift(Path(self.tmp, "run"))
        super()._init_datadir()

    def _enter(self, argv: list[str], as_user: bool = True, init: str | None = None
               ) -> list[str]:
        cmd = super()._enter(argv, as_user, init)
        assert cmd[0] == "unshare"
        return ["unshare", "--user", "--map-user=0", "--map-group=0",
                f"--map-users={SHIFT + 1},1,65535", f"--map-groups={SHIFT + 1},1,65535",
                *cmd[1:]]

    def exec_argv(self, argv: list[str], user: bool = False) -> list[str]:
        """nsenter into its user namespace too, so that its ids are its own."""
        base = super().exec_argv(argv, user)
        return [base[0], "-U", *base[1:]]
