"""The PostgreSQL engine's state for one instance (Instance.state): what discovery read of a
cluster, which the findings, the sizing and the actions read in turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpadvise.api.face import Mapping


@dataclass
class Cluster:
    datadir: str
    pid: int | None = None
    port: int | None = None
    socket_dir: str | None = None
    owner: str | None = None
    owner_uid: int | None = None
    config_file: str | None = None
    major: int | None = None
    settings: dict[str, str] = field(default_factory=dict)  # raw GUC text, from SHOW or files
    origins: dict[str, str] = field(default_factory=dict)  # GUC -> "file:line" or "server"
    # Where the running server took each setting from (pg_settings: source, sourcefile,
    # sourceline), for people: "FILE:LINE", "ALTER SYSTEM (FILE:LINE)", "command line" ...
    sources: dict[str, str] = field(default_factory=dict)
    pending_restart: tuple[str, ...] = ()
    # pg_file_settings rows with an error ("FILE:LINE: error"), read over the connection
    file_errors: tuple[str, ...] = ()
    # why the server would not start again with its files as they are (preflight.would_start)
    config_broken: str | None = None
    connected_as: str | None = None
    # What discovery observed, for the findings (the instance's engine state is this object).
    shm_mapping: Mapping | None = None  # the main shared memory segment in the smaps
    observe_note: str | None = None  # why the backing could not be seen
    estimate_reason: str | None = None  # why the count is an estimate, not PostgreSQL's own
    bindir: str | None = None  # its own major's binaries (binaries.find), or None
    bindir_source: str = ""  # where they were found, or why none fits
    manager: Any = None  # the cluster manager running it (patroni.Manager), or None
    # what the command line of a stopped cluster's last start set (postmaster.opts, opts.py):
    # they outrank its files, and postgres -C counts with them again
    argv_settings: dict[str, str] = field(default_factory=dict)
    # what a running postmaster's own command line sets (opts.settings_of)
    own_argv: dict[str, str] = field(default_factory=dict)
    # where the settings the plan changes come from (layers.winning): name -> Layer
    layers: dict[str, Any] = field(default_factory=dict)
    # a member of a managed cluster another member of which will not take huge pages: the
    # cluster's configuration changes for all of them or none (why, naming that member)
    peer_held_back: str | None = None
    # Its files as the server sees them (roots.view: the host's SysRoot, or its own root's),
    # and that root where it is not hpadvise's (roots.ProcRoot, journaled with its actions)
    fs: Any = None
    root: Any = None
    ns_pid: int | None = None  # the postmaster's PID in its own PID namespace
