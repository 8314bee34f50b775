"""The MySQL/MariaDB engine's state for one instance (Instance.state): what discovery read of
a server, which the findings and the actions read in turn."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hpadvise.api.face import Mapping

from .conf import OptionFiles
from .sizing import Allocation, version_tuple


@dataclass
class Server:
    pid: int | None
    datadir: str | None = None
    socket: str | None = None
    port: int | None = None
    owner: str | None = None
    owner_uid: int | None = None
    flavour: str = "mariadb"
    version: str | None = None
    argv: tuple[str, ...] = ()
    cwd: str | None = None
    settings: dict[str, str] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    options: OptionFiles = field(default_factory=OptionFiles)
    counted: dict[str, list[int]] = field(default_factory=dict)
    connected_as: str | None = None
    supervisor: tuple[int, tuple[str, ...]] | None = None  # mysqld_safe parent
    engines: tuple[str, ...] = ()
    next_start: dict[str, str] | None = None  # what the option files + command line say now
    # What discovery observed, for the findings (the instance's engine state is this object).
    huge_maps: list[Mapping] = field(default_factory=list)  # its hugetlb mappings
    anon_huge_kb: int | None = None  # THP in its private memory
    thp_enabled: str | None = None  # "0" when the server switched THP off for itself
    fallback: list[str] | None = None  # fallback lines of its error log; None: unreadable
    observe_note: str | None = None
    layers: dict = field(default_factory=dict)  # option -> layers.Layer it takes its value from
    # where the running server says each setting came from (origins.from_server), for people
    sources: dict = field(default_factory=dict)
    allocations: list[Allocation] = field(default_factory=list)
    required_pages: int = 0  # pages of the allocations that must be on huge pages
    # Its files as the server sees them (roots.view), the root it has where that is not
    # hpadvise's (roots.ProcRoot, journaled with its actions), and its PID in its own PID
    # namespace (what its error log says)
    fs: Any = None
    root: Any = None
    ns_pid: int | None = None
    # where the server learns the huge page sizes, when its root does not show it (a root
    # without /sys): it then takes no large pages at all (versions.Model.sizes_from)
    sizes_hidden: str | None = None

    @property
    def vt(self) -> tuple[int, ...] | None:
        return version_tuple(self.version)

    @property
    def log_error(self) -> str | None:
        le = self.settings.get("log_error")
        if not le or le in ("ON", "stderr"):
            return None
        return le if os.path.isabs(le) or not self.datadir else os.path.join(self.datadir, le)
