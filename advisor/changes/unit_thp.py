"""A systemd unit's own THP mode: a drop-in with MemoryTHP= (systemd.exec(5), systemd v260 and
later: PR_SET_THP_DISABLE, or its except-advised mode, before the unit's processes start;
kept by their children), then systemd reloaded so that the unit's next start takes it.

A server restarted through its unit (`systemctl restart`) is started by PID 1, not by
hpadvise: a prctl in hpadvise's own process (thp_exec.py) does not reach it. The drop-in does,
at this restart and at every later start, boot included. Restored like any file (removed
where there was none), with systemd reloaded again; the restart that follows in a rollback
starts the server in the host's mode."""

from __future__ import annotations

import re
import subprocess
from typing import Any

from ..facts.thp_exec import SYSTEMD as MEMORY_THP
from .action_base import ActionError
from .file_actions import File

NAME = "hpadvise-thp.conf"
# MemoryTHP= came with systemd v260 (systemd pull request 39085, "Add support for disabling
# THPs"); an older systemd refuses the unit's section with an unknown-key warning and ignores it
MIN_SYSTEMD = 260


class UnitThp(File):
    kind = "unit_thp"

    def __init__(self, path: str, mode: int = 0o644, uid: int | None = None,
                 gid: int | None = None, unit: str = ""):
        super().__init__(path, mode, uid, gid)
        self.unit = unit

    @classmethod
    def for_unit(cls, unit: str, root: str = "") -> UnitThp:
        return cls(f"{root}/etc/systemd/system/{unit}.d/{NAME}", unit=unit)

    @staticmethod
    def content(unit: str, thp_mode: str) -> str:
        return File.encode(f"# hpadvise: {unit} in THP mode {thp_mode} of its own, whatever "
                           f"the host-wide mode\n[Service]\nMemoryTHP={MEMORY_THP[thp_mode]}\n")

    def spec(self) -> dict:
        return {**super().spec(), "unit": self.unit}

    @property
    def label(self) -> str:
        return f"{self.unit}: its THP mode (MemoryTHP= in {self.path})"

    def set(self, value: str | None) -> None:
        super().set(value)
        reload()

    def shell(self, new: Any) -> list[str]:
        return super().shell(new) + ["systemctl daemon-reload"]


def reload() -> None:
    """systemctl daemon-reload: a unit's next start reads its drop-ins again."""
    try:
        r = subprocess.run(["systemctl", "daemon-reload"], capture_output=True, text=True,
                           timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ActionError(f"systemctl daemon-reload failed: {exc}") from None
    if r.returncode != 0:
        raise ActionError(f"systemctl daemon-reload failed: {r.stderr.strip()[-300:]}")


def systemd_version() -> int | None:
    """The running systemd's version (`systemctl --version`: "systemd 262 (262.1-1)")."""
    try:
        r = subprocess.run(["systemctl", "--version"], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.match(r"systemd (\d+)", r.stdout)
    return int(m.group(1)) if m else None
