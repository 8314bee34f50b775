"""PostgreSQL: discover clusters, count the huge pages their shared memory needs, check that
they really run on them, set huge_pages / huge_page_size, restart, and benchmark.

One module per job: conf (postgresql.conf grammar and units), sizing (the page count),
discovery (clusters and what they run on), findings (what check says, the setting changes),
actions (apply's ALTER SYSTEM and restart); validate/ holds validate's and capture's code.
"""

from __future__ import annotations

import re
from typing import Any

from hpadvise.api.face import (Change, EngineOption, HostFacts, Instance, Profile, ServerEngine,
                               Targets, known, restart_advice)

from . import findings as _findings
from .actions import PgRestart, PgSetting, spec_of
from .validate.capture import PgReload
from .validate.capture_log import CaptureDir, PgLogSetting
from .patroni_actions import PatroniParams, PatroniRestart
from .discovery import Discovery
from .state import Cluster


class PostgresEngine(ServerEngine):
    """PostgreSQL: static huge pages for the main shared memory segment.

    Sizing: `shared_memory_size_in_huge_pages` (PG >= 15) from the running server or from
    `postgres -C` on a stopped one; PG <= 14 gets the per-major estimate (sizing.py) or, when
    running, the size of its shared mapping. Recommends `huge_pages = on`: `try` falls back
    silently."""

    name = "postgres"
    description = "PostgreSQL (shared_buffers and the rest of the main shared memory segment)"
    process_names = ("postgres", "postmaster")
    profile_schema = {"huge_pages": (str, ("on", "try", "off"), "on")}
    codes = _findings.CODES
    discovery, rules, state_type = Discovery, _findings, Cluster
    action_kinds = (PgSetting, PgRestart, PatroniParams, PatroniRestart, PgReload,
                    PgLogSetting, CaptureDir)
    applies = ("sets huge_pages and huge_page_size by ALTER SYSTEM, or through Patroni for "
               "its clusters, restarts (with --restart) and verifies")
    benches = ("pgbench", "tpcc", "replay")
    validate_default = True
    options = (EngineOption("--pgdata", "Also take a stopped PostgreSQL cluster in this data "
                            "directory (repeatable): sized and planned for, or captured by "
                            "snapshot.", "DIR", names_instances=True),
               EngineOption("--pg-bindir", "PostgreSQL binaries to use where a cluster's "
                            "own are not found by postmaster.opts or the usual layouts: a "
                            "stopped cluster's, size's planned server's, validate's scratch "
                            "servers' (repeatable).", "DIR",
                            commands=("check", "snapshot", "k8s", "size", "validate")))

    def reference_of(self, spec: dict) -> str | None:
        """A cluster an apply changed is found again by its data directory."""
        return spec.get("datadir")

    def needs_pages_at_start(self, inst: Instance) -> bool:
        """A stopped cluster with huge_pages = on does not start without its pages."""
        c = inst.state
        return isinstance(c, Cluster) and c.settings.get("huge_pages") == "on"

    def takes_dsn(self, dsn: str) -> bool:
        from .discovery import is_pg_dsn
        return is_pg_dsn(dsn)

    def usable(self, inst: Instance, c: Cluster) -> bool:
        return bool(c.settings)

    def references(self, inst: Instance) -> tuple[str, ...]:
        """A cluster is named by its data directory or its port, and a Debian cluster as its
        packaging names it too: "15/main" and "main" (pg_lsclusters, pg_ctlcluster; its
        configuration lives in /etc/postgresql/VERSION/NAME/)."""
        c = inst.state
        if c is None:
            return ()
        m = re.fullmatch(r"/etc/postgresql/([^/]+)/([^/]+)/postgresql\.conf", c.config_file or "")
        debian = (f"{m.group(1)}/{m.group(2)}", m.group(2)) if m else ()
        return tuple(str(x) for x in (c.datadir, c.port) if x) + debian

    def changes(self, inst: Instance, page_kb: int | None, host: HostFacts,
                profile: Profile) -> list[Change]:
        c = self.state(inst)
        return _findings.changes(inst, c, page_kb, host, profile) if c else []

    def what_if(self, args: list[str], host: HostFacts, version: str | None,
                targets: Targets) -> Instance:
        from .whatif import what_if
        return what_if(args, host, version, targets.get("pg_bindir"))

    def huge_page_settings(self, inst: Instance, page_kb: int, host: HostFacts) -> dict[str, str]:
        """huge_pages = on (a short pool fails the start instead of falling back), and
        huge_page_size when the size is not the kernel's default (PostgreSQL >= 14)."""
        out = {"huge_pages": "on"}
        if page_kb != host.default_hugepage_kb:
            out["huge_page_size"] = "1GB" if page_kb == 1048576 else f"{page_kb}kB"
        return out

    def operator_manifest(self, inst: Instance, resources: dict,
                          settings: dict[str, str]) -> dict | None:
        """A CloudNativePG Cluster (postgresql.cnpg.io/v1): spec.resources are its instances'
        pod resources, spec.postgresql.parameters the server's settings, strings all (the
        CRD types every parameter value as a string)."""
        return {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
                "metadata": {"name": "postgres"},
                "spec": {"instances": 1, "resources": resources,
                         "postgresql": {"parameters": {k: str(v) for k, v in settings.items()}}}}

    def actions(self, inst: Instance, changes: list[Change]) -> list[tuple[Any, Any]]:
        """ALTER SYSTEM for each setting the plan changes on this instance, where that takes
        (a change blocked by a layer that outranks it, such as the postmaster's command
        line, is made by no one: advice says where to change it). A cluster Patroni runs
        gets the settings in Patroni's configuration instead (every member's, once for all
        of them)."""
        c = inst.state
        mine = {ch.target: str(ch.recommended) for ch in changes
                if ch.kind == "setting" and ch.instance == inst.id and not ch.blocked}
        if isinstance(c, Cluster) and c.manager is not None:
            m = c.manager
            if not mine or not (m.api and m.scope):
                return []  # its REST API unread: advice prints the patronictl commands
            a = PatroniParams(m.api, m.scope, sorted(mine), m.config, inst.id, dcs=m.dcs)
            return [(a, {n: mine[n] for n in a.names})]
        if not known(c.datadir):  # nowhere to write: advice says what supplies it
            return []
        spec = spec_of(c, inst.id)
        return [(a, a.wanted) for a in (PgSetting(n, v, **spec) for n, v in mine.items())]

    def advice(self, inst: Instance, changes: list[Change]) -> list[str]:
        c = inst.state
        mine = {ch.target: str(ch.recommended) for ch in changes
                if ch.kind == "setting" and ch.instance == inst.id and not ch.blocked}
        out = [f"{inst.id}: {ch.target} = {ch.recommended} is not set by apply: {ch.blocked}"
               for ch in changes if ch.kind == "setting" and ch.instance == inst.id
               and ch.blocked]
        if isinstance(c, Cluster) and not known(c.datadir) and mine:
            out.append(f"{inst.id}: {', '.join(sorted(mine))} not set: {c.datadir.line()}")
        elif isinstance(c, Cluster) and c.root is not None and inst.running and \
                (mine or inst.backing != "hugetlb"):
            pg_ctl = f"{c.bindir}/pg_ctl" if c.bindir else "pg_ctl"
            out.append(restart_advice(
                inst.id, c.root, c.ns_pid == 1,
                f"runuser -u {c.owner} -- {pg_ctl} -D {c.datadir} -m fast restart"))
        if isinstance(c, Cluster) and c.manager is not None and mine:
            if c.manager.api and c.manager.scope:
                out.append(f"{inst.id} is managed by {c.manager.describe()}: its settings go "
                           "into Patroni's configuration and Patroni restarts it (replicas "
                           "first)")
            else:
                out.append(f"{inst.id} is managed by {c.manager.describe()}: its REST API "
                           "could not be read, so apply changes nothing behind it; run "
                           + " && ".join(c.manager.commands(mine)))
        return out

    def restart_action(self, inst: Instance) -> PgRestart | None:
        c = inst.state
        if not isinstance(c, Cluster) or not inst.running or not c.owner or \
                not known(c.datadir):
            return None
        if c.root is not None:  # never behind its container runtime's back: advice says how
            return None
        if c.manager is not None:  # never pg_ctl behind a cluster manager's back
            m = c.manager
            if not (m.api and m.scope):
                return None
            return PatroniRestart(**spec_of(c, inst.id), api=m.api, scope=m.scope,
                                  member=m.member, role=m.role, config=m.config)
        return PgRestart(**spec_of(c, inst.id))

    def capture(self, inst, out_dir, duration_s, journal_dir, base, say, progress,
                yes=False):
        from .validate.capture import capture
        return capture(inst, out_dir, duration_s, journal_dir, base, say, progress, yes)

    def capture_privacy(self, out_dir: str) -> str:
        from .validate.capture import PRIVACY
        return PRIVACY.format(dir=out_dir)

    def not_running(self, ref: str) -> str | None:
        from .validate.sources import stopped_at
        return stopped_at(ref)

    def bench_target(self, opts):
        from .validate.bench import PgTarget
        return PgTarget(opts)
