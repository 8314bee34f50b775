"""MySQL and MariaDB: discover servers, count the huge pages their large-page allocations need,
catch the silent fallback to normal pages, set large_pages, restart, and benchmark.

One module per job: conf (option files), sizing (the buffers my_large_malloc() maps),
discovery (servers and what they hold), findings (what check says, the setting change),
actions (apply's option file edit and restart), bench (validate's scratch MariaDB).
"""

from __future__ import annotations

from typing import Any

from hpadvise.api.face import (Change, HostFacts, Instance, Profile, ServerEngine, Targets,
                               restart_advice)

from . import findings as _findings
from .actions import MyOption, MyRestart, option_target, spec_of
from .discovery import PROCESS_NAMES, Discovery
from .state import Server


class MySQLEngine(ServerEngine):
    """MySQL / MariaDB: static huge pages for the buffers my_large_malloc() places there.

    Sizing: every large-page allocation of the running version (buffer pool, log buffers, key
    cache segments, Aria page cache), each rounded up to the page size, with block counts read
    from the server when connected. Recommends large_pages=ON and catches the silent fallback
    in the error log and smaps."""

    name = "mysql"
    aliases = ("mariadb",)
    description = "MySQL / MariaDB (InnoDB buffer pool, log buffers, key caches, Aria cache)"
    process_names = PROCESS_NAMES
    profile_schema = {"large_pages": (str, ("ON", "OFF"), "ON")}
    codes = _findings.CODES
    discovery, rules, state_type = Discovery, _findings, Server
    action_kinds = (MyOption, MyRestart)
    applies = ("sets large_pages in the server's option files, restarts (with --restart) and "
               "verifies")
    benches = ("tpcc",)

    def takes_dsn(self, dsn: str) -> bool:
        from .discovery import is_my_dsn
        return is_my_dsn(dsn)

    def usable(self, inst: Instance, s: Server) -> bool:
        return not inst.errors

    def references(self, inst: Instance) -> tuple[str, ...]:
        """A server is named by its data directory, its port or its socket."""
        s = inst.state
        return tuple(str(x) for x in (s.datadir, s.port, s.socket) if x) \
            if s is not None else ()

    def changes(self, inst: Instance, page_kb: int | None, host: HostFacts,
                profile: Profile) -> list[Change]:
        s = self.state(inst)
        return _findings.changes(inst, s, profile, page_kb is not None) if s else []

    def what_if(self, args: list[str], host: HostFacts, version: str | None,
                targets: Targets) -> Instance:
        from .whatif import what_if
        return what_if(args, host, version)

    def huge_page_settings(self, inst: Instance, page_kb: int, host: HostFacts) -> dict[str, str]:
        return {"large_pages": "ON"}  # the server takes the default huge page size

    def actions(self, inst: Instance, changes: list[Change]) -> list[tuple[MyOption, Any]]:
        """The option in the file whose line wins (so that the change wins too), else in a
        drop-in or the last file with a server group; a blocked change is made by no one."""
        s: Server = inst.state
        out = []
        for ch in changes:
            if ch.kind == "setting" and ch.instance == inst.id and not ch.blocked:
                lay = s.layers.get(ch.target)
                path, dropin = (lay.file, False) if lay is not None and lay.file \
                    else option_target(s)
                a = MyOption(path, ch.target, str(ch.recommended), dropin, **spec_of(s, inst.id))
                out.append((a, a.wanted))
        return out

    def advice(self, inst: Instance, changes: list[Change]) -> list[str]:
        out = [f"{inst.id}: {ch.target} = {ch.recommended} is not set by apply: {ch.blocked}"
               for ch in changes if ch.kind == "setting" and ch.instance == inst.id
               and ch.blocked]
        s = inst.state
        mine = [ch for ch in changes if ch.kind == "setting" and ch.instance == inst.id]
        if isinstance(s, Server) and s.root is not None and inst.running and \
                (mine or not s.huge_maps or s.fallback):
            # no ctl restarts a mysqld: whatever started it there restarts it
            out.append(restart_advice(inst.id, s.root, s.ns_pid == 1, None))
        return out

    def restart_action(self, inst: Instance) -> MyRestart | None:
        s = inst.state
        if not isinstance(s, Server) or not inst.running or not s.pid or not s.argv:
            return None
        if s.root is not None:  # never behind its container runtime's back: advice says how
            return None
        return MyRestart(**spec_of(s, inst.id))

    def bench_target(self, opts):
        from .validate.bench import MariaTarget
        return MariaTarget(opts)
