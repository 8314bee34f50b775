"""PostgreSQL discovery: postmasters in the process table, their settings (over the socket,
or from the configuration files), stopped clusters named by their data directory, and what
their shared memory sits on now.

- The main segment is an anonymous shared mmap (src/backend/port/sysv_shmem.c,
  CreateAnonymousSharedMemory): "/anon_hugepage (deleted)" on hugetlb, "/dev/zero (deleted)"
  otherwise. huge_pages=try falls back to normal pages logging only at DEBUG1 (sysv_shmem.c),
  so the truth is the postmaster's smaps.
"""

from __future__ import annotations

import os
import re

from hpadvise.api.face import (HostFacts, Instance, Proc, ProcTable, SysRoot, Targets, Unknown,
                               error_line, known, proc_root, redact_dsn)

from .actions import connect_socket
from .conf import DEFAULTS, ConfError, ConfUnreadable, parse_int, parse_memory, read_conf
from .findings import CODES
from . import binaries
from .layers import winning
from .layouts import debian_conf, found_datadirs, live_pidfile
from .observed import observe
from .opts import settings_of, take_own
from .patroni import manager_of
from .preflight import would_start
from .reported import query, source_of
from .sizing import size_running, size_stopped
from .state import Cluster  # noqa: F401  (discovery makes them)
from .whereis import locate

NAME = "postgres"
PLANNED = ("huge_pages", "huge_page_size")  # the settings the plan may change


# The modes in which `postgres` runs without being a server: bootstrap (initdb), single-user,
# a configuration check or listing, an answer to -C (src/backend/main/main.c: the first
# argument picks the mode; PostmasterMain prints a -C answer and exits). None takes shared
# memory for other processes or accepts connections.
NOT_A_SERVER = ("--boot", "--single", "--check", "--describe-config", "--version", "-V")


def _postmasters(procs: ProcTable) -> list[Proc]:
    pg = procs.by_name("postgres", "postmaster")
    pids = {p.pid for p in pg}
    return [p for p in pg if p.ppid not in pids and not
            (len(p.cmdline) > 1 and (p.cmdline[1] in NOT_A_SERVER or "-C" in p.cmdline[1:]))]


def dsn_error(exc: Exception, dsn: str | None) -> str:
    """A driver's error as one line without the DSN's password, whatever the driver echoed."""
    from .libpq import password_of
    return error_line(exc, dsn, password_of(dsn) if dsn else None)


def _hold_back_together(insts: list[Instance]) -> None:
    """The members of one Patroni cluster share its configuration: when one of them keeps
    huge_pages off where hpadvise does not change it, none is changed, so that the cluster
    is never left with its members on different pages."""
    from .findings import held_back
    groups: dict[tuple, list[Instance]] = {}
    for i in insts:
        m = getattr(i.state, "manager", None)
        if m is not None and m.scope:
            groups.setdefault((m.dcs, m.scope), []).append(i)
    for members in groups.values():
        why = next(((i.id, w) for i in members if (w := held_back(i.state))), None)
        for i in members if why else ():
            if i.id != why[0]:
                i.state.peer_held_back = (f"its cluster changes all at once, and member "
                                          f"{why[0]} will not take huge pages: {why[1]}")


def is_pg_dsn(dsn: str) -> bool:
    return not re.match(r"^(mysql|mariadb)(\+\w+)?://", dsn)


class Discovery:
    """One discovery pass; `live` is False on a snapshot (nothing to connect to or run)."""

    def __init__(self, connect_timeout: int = 3):
        self.connect_timeout = connect_timeout
        self.live = True
        self.bindirs: tuple[str, ...] = ()  # --pg-bindir

    def discover(self, host: HostFacts, procs: ProcTable, targets: Targets) -> list[Instance]:
        sr = procs.sr
        self.live = sr.live
        clusters: list[Cluster] = []
        for pm in _postmasters(procs):
            if not pm.cmdline:  # exited while we looked (or a zombie): nothing to inspect
                continue
            clusters.append(self._from_process(sr, procs, pm))
        out: list[Instance] = []
        dsn_for: dict[int, str] = {}
        extra: list[Instance] = []
        for dsn in targets.dsns:
            if not is_pg_dsn(dsn):
                continue
            inst = self._from_dsn(dsn, clusters, dsn_for, host, procs)
            if inst is not None:
                extra.append(inst)
        self.bindirs = targets.get("pg_bindir")
        # each running cluster's directory as the host reaches it (one in a root of its own
        # is not the host's directory of the same name)
        seen = {os.path.realpath(c.fs.path(c.datadir)) for c in clusters if known(c.datadir)}
        for d in targets.get("pgdata"):
            if os.path.realpath(d) in seen:
                continue
            seen.add(os.path.realpath(d))
            extra.append(self._stopped(sr, procs, d, host))
        for d, how in found_datadirs(sr, targets.remembered_by(NAME)):
            if os.path.realpath(sr.path(d)) in seen or live_pidfile(sr, d):
                continue
            seen.add(os.path.realpath(sr.path(d)))
            inst = self._stopped(sr, procs, d, host)
            inst.found = how
            if inst.errors:  # nobody named it: what could not be read is a note, not an error
                inst.findings.append(CODES["pg.unreadable"](
                    "A stopped cluster hpadvise found but could not read; the pool keeps "
                    "nothing for it. Name it with --pgdata to see why.",
                    "; ".join(inst.errors), inst.id))
                inst.errors = []
            extra.append(inst)
        for i, c in enumerate(clusters):
            out.append(self._running(sr, procs, c, host, dsn_for.get(i)))
        _hold_back_together(out)
        return out + extra

    def _from_process(self, sr: SysRoot, procs: ProcTable, pm: Proc) -> Cluster:
        argv = pm.cmdline
        # its own arguments, as the postmaster read them (opts.settings_of: the last wins)
        given, ddir = settings_of(argv[1:])
        fs = procs.fs(pm.pid)  # its files as it sees them: its own root's, if it has one
        env = pm.environ() if ddir is None else None
        datadir, conf, _ = locate(fs, sr, pm, given, ddir, env)
        c = Cluster(datadir=datadir, pid=pm.pid, owner=procs.owner(pm),
                    owner_uid=pm.uid, config_file=conf, fs=fs,
                    root=proc_root(fs), ns_pid=pm.ns_pid, own_argv=given)
        port = given.get("port")
        if known(datadir):
            pidfile = fs.read(f"{datadir}/postmaster.pid", quiet_missing=True)
            if pidfile:
                # Layout: src/include/utils/pidfile.h (LOCK_FILE_LINE_*).
                lines = pidfile.splitlines()
                if len(lines) >= 5:
                    port = port or lines[3].strip()
                    c.socket_dir = lines[4].strip() or None
            ver = fs.read(f"{datadir}/PG_VERSION", quiet_missing=True)
            if ver and ver.strip().isdigit():
                c.major = int(ver.strip())
        c.port = int(port) if port and port.isdigit() else None
        return c

    def _connect(self, c: Cluster, dsn: str | None):
        if dsn:  # the DSN expanded in place; the keywords after it override it
            from .libpq import Connection
            return Connection({"dbname": dsn, "connect_timeout": self.connect_timeout,
                               "application_name": "hpadvise"}, self.bindirs)
        # a server in its own root: its socket there, and libpq from the host (the root's
        # own library is built for the root's C library, not necessarily the host's)
        return connect_socket(c.fs.path(c.socket_dir) if c.root and c.socket_dir
                              else c.socket_dir, c.port, c.owner, self.connect_timeout,
                              None if c.root else c.bindir)

    def _from_dsn(self, dsn, clusters, dsn_for, host, procs) -> Instance | None:
        # the server says where its data is; a role without pg_read_all_settings is not told
        probe = Cluster(datadir=Unknown(
            f"the data directory of {redact_dsn(dsn)}", "the server did not show "
            "data_directory to this role (it needs pg_read_all_settings)",
            "connect as a role that may read it, or as the server's owner"))
        try:
            with self._connect(probe, dsn) as conn:
                query(conn, probe)
        except Exception as exc:
            inst = Instance(NAME, f"postgres:{redact_dsn(dsn)}", redact_dsn(dsn), running=False)
            inst.errors.append(f"cannot connect to {redact_dsn(dsn)}: "
                               f"{dsn_error(exc, dsn)}; check host, port, user "
                               "and password (or PGPASSWORD / ~/.pgpass)")
            return inst
        for i, c in enumerate(clusters):
            if known(c.datadir) and known(probe.datadir) and c.root is None and \
                    os.path.realpath(c.datadir) == os.path.realpath(probe.datadir):
                dsn_for[i] = dsn
                return None
        # A server this host does not run (remote, or another container): report its settings.
        probe.pid = None
        inst = self._instance(probe, host, running=True)
        inst.id = f"postgres:{redact_dsn(dsn)}"
        inst.findings.append(CODES["pg.not_local"](
            "Its huge pages must be reserved on the host that runs it; the demand below is "
            "computed from its settings.", f"data_directory={probe.datadir}"
            if known(probe.datadir) else probe.datadir.line(), inst.id))
        size_running(inst, probe, host, None)
        return inst

    def _running(self, sr, procs, c: Cluster, host, dsn: str | None) -> Instance:
        c.bindir, c.bindir_source = binaries.find(sr, c, self.bindirs)
        host_sr, sr = sr, c.fs or sr  # the cluster's files as it sees them
        c.manager = manager_of(host_sr, procs, c.datadir, sr.live)
        note = None
        if not sr.live:  # an offline snapshot: the server it shows is not ours to talk to
            note = "offline audit of a snapshot"
        elif not dsn and (c.port is None or c.socket_dir is None):
            # Without postmaster.pid the socket is unknown; a guessed default could reach
            # another server entirely.
            note = "postmaster.pid unreadable: socket unknown (run as root or pass --dsn)"
        else:
            expected = c.datadir
            try:
                with self._connect(c, dsn) as conn:
                    query(conn, c)
                if known(expected) and os.path.realpath(sr.path(c.datadir)) != \
                        os.path.realpath(sr.path(expected)):
                    raise RuntimeError(f"the server on that socket serves {c.datadir}, "
                                       f"not {expected}")
            except Exception as exc:
                msg = dsn_error(exc, dsn)
                if dsn:
                    inst = self._instance(c, host, running=True)
                    inst.errors.append(f"cannot connect to {redact_dsn(dsn)}: {msg}")
                    return inst
                note = msg
            if note is None and sr.recorded is not None:
                try:  # a snapshot keeps the config files for its offline audit
                    self._read_files(sr, Cluster(c.datadir, config_file=c.config_file))
                except ConfError:
                    pass
        conf_error = unreadable = None
        if note is not None:
            try:
                self._read_files(sr, c)
                take_own(c, c.own_argv)  # what its command line set outranks its files
            except ConfUnreadable as exc:
                unreadable = str(exc)
            except ConfError as exc:
                conf_error = str(exc)
        c.layers = {n: winning(sr, c, n) for n in PLANNED}
        inst = self._instance(c, host, running=True)
        self._would_start(inst, c)
        if note is not None:
            inst.findings.append(CODES["pg.no_connection"](
                "Without a connection the running values are read from postgresql.conf, "
                "postgresql.auto.conf and their includes, which may differ from what the server "
                "loaded. " + sr.or_offline("Pass --dsn to connect as another user."), note, inst.id,
                title="Settings read from the configuration files"
                + ("" if not sr.live else f" (could not connect as {c.owner})")))
        if conf_error:
            inst.errors.append(conf_error)
        if unreadable:
            inst.findings.append(CODES["pg.unreadable"](
                "Neither a connection nor the configuration files were available; run as root "
                f"or as {c.owner}, or pass --dsn.", unreadable, inst.id))
            inst.errors.append(f"{inst.id}: cannot size it as this user ({unreadable}); run as "
                               f"root or as {c.owner}, or pass --dsn")
            c.settings.clear()
        observe(inst, c, procs, host)
        size_running(inst, c, host, c.shm_mapping)
        return inst

    def _would_start(self, inst: Instance, c: Cluster) -> None:
        """A running server whose configuration files changed since it started: would it
        start again? pg_file_settings lists the files' errors, but a value its parameter
        rejects reads like a change waiting for a restart there ("setting could not be
        applied"); the server's own parser tells them apart (preflight.would_start). Where it
        cannot be asked, a syntax error or an include loop still says enough."""
        if not c.file_errors or not self.live:
            return
        # a server in its own root: its binary runs there only (its libraries are its root's)
        ok, why = (None, "") if c.root or not known(c.datadir) else \
            would_start(c.bindir, c.datadir, c.config_file, c.owner_uid)
        if ok is None:
            hard = [e for e in c.file_errors if not e.endswith("setting could not be applied")]
            ok, why = (False, "; ".join(hard)) if hard else (True, "")
        if ok:
            return
        c.config_broken = why
        inst.errors.append(f"{inst.id}: its configuration files have errors, so it would not "
                           f"start again: {why}; fix them before it restarts")
        inst.findings.append(CODES["pg.config.broken"](
            "The server runs with the configuration it read when it started, but the files "
            "have changed since: a restart (by anyone, or a reboot) would fail and leave the "
            "database down. apply restarts nothing until they are fixed.",
            why, inst.id))

    def _stopped(self, sr: SysRoot, procs: ProcTable, datadir: str, host: HostFacts) -> Instance:
        c = Cluster(datadir=datadir)
        inst = Instance(NAME, f"postgres:{datadir}", datadir, running=False)
        p = sr.path(datadir)
        if not p.is_dir():
            inst.errors.append(f"--pgdata {datadir}: no such directory")
            return inst
        try:
            st = p.stat()
            c.owner_uid = st.st_uid
            c.owner = procs.user(st.st_uid)
            if not os.access(p, os.R_OK | os.X_OK):
                inst.errors.append(f"--pgdata {datadir}: permission denied; run as root or as "
                                   f"the cluster owner ({c.owner})")
                return inst
            ver = sr.read(f"{datadir}/PG_VERSION", quiet_missing=True)
            if not ver or not ver.strip().isdigit():
                inst.errors.append(f"--pgdata {datadir}: not a PostgreSQL data directory "
                                   "(no PG_VERSION); give the directory initdb created")
                return inst
            c.major = int(ver.strip())
            from .opts import last_start, take
            line = last_start(sr, datadir)  # its last start's options outrank its files
            c.config_file = line.settings.get("config_file") if line else None
            self._read_files(sr, c)
            take(c, line)
        except ConfError as exc:
            inst.errors.append(str(exc))
            return inst
        c.layers = {n: winning(sr, c, n) for n in PLANNED}
        inst = self._instance(c, host, running=False)
        inst.label = datadir
        inst.id = f"postgres:{datadir}"
        c.bindir, c.bindir_source = binaries.find(sr, c, self.bindirs)
        try:
            size_stopped(inst, c, host, self.live, c.bindir, c.bindir_source)
        except ConfError as exc:  # this cluster's configuration: its error, not the report's
            inst.errors.append(str(exc))
        return inst

    def _read_files(self, sr: SysRoot, c: Cluster) -> None:
        if not known(c.datadir):
            raise ConfError(f"cannot read its configuration: {c.datadir.line()}")
        conf = c.config_file or f"{c.datadir}/postgresql.conf"
        if not c.config_file and not sr.exists(conf):
            conf = debian_conf(sr, c.datadir) or conf
        c.config_file = conf
        settings = read_conf(sr, conf)
        auto = f"{c.datadir}/postgresql.auto.conf"
        if sr.exists(auto):
            read_conf(sr, auto, settings)
        for k, v in DEFAULTS.items():
            c.settings.setdefault(k, v)
            c.origins.setdefault(k, "default")
        for k, (v, origin) in settings.items():
            c.settings[k], c.origins[k] = v, origin
        # Validate what sizing depends on now, with the file and line in the message.
        for k in ("shared_buffers", "wal_buffers", "huge_page_size", "min_dynamic_shared_memory"):
            parse_memory(k, c.settings[k], c.origins[k])
        for k in ("max_connections", "max_worker_processes", "max_wal_senders",
                  "autovacuum_max_workers", "max_locks_per_transaction",
                  "max_prepared_transactions"):
            parse_int(k, c.settings[k], c.origins[k])
        if "autovacuum_worker_slots" in c.settings:  # 18+: sizing counts it (sizing.py)
            parse_int("autovacuum_worker_slots", c.settings["autovacuum_worker_slots"],
                      c.origins["autovacuum_worker_slots"])
        # Enum values are case-insensitive (guc.c, parse_and_validate_value: pg_strcasecmp).
        for k in ("huge_pages", "shared_memory_type"):
            c.settings[k] = c.settings[k].lower()
        if c.settings["huge_pages"] not in ("on", "off", "try"):
            raise ConfError(f"{c.origins['huge_pages']}: invalid value for huge_pages: "
                            f"{c.settings['huge_pages']!r}; use on, off or try")
        if c.port is None and c.settings.get("port", "").isdigit():
            c.port = int(c.settings["port"])

    def _instance(self, c: Cluster, host: HostFacts, running: bool) -> Instance:
        iid = f"postgres:{c.port}" if running and c.port else \
            f"postgres:{c.datadir}" if known(c.datadir) else f"postgres:pid{c.pid}"
        s = c.settings
        shown = {k: s[k] for k in ("shared_buffers", "huge_pages", "huge_page_size",
                                   "max_connections", "shared_memory_size",
                                   "shared_memory_size_in_huge_pages", "shared_memory_type",
                                   "huge_pages_status")
                 if k in s}
        # a data directory that could not be read is said so, with what supplies it
        shown["data_directory"] = c.datadir if known(c.datadir) else c.datadir.as_json()
        if c.root is not None:  # its paths and users are those of its own root
            shown["root"] = c.root.describe()
        if c.port:
            shown["port"] = c.port
        if c.pending_restart:
            shown["pending_restart"] = list(c.pending_restart)
        if c.manager is not None:
            shown["manager"] = c.manager.describe()
        # where each shown setting comes from: the server's word, else the files read
        # ("FILE:LINE" or "default" in origins)
        src = {k: c.sources.get(k) or (source_of(None, *c.origins[k].rsplit(":", 1))
                                        if ":" in c.origins.get(k, "") else c.origins.get(k))
               for k in ("shared_buffers", "huge_pages", "huge_page_size", "max_connections")
               if k in s}
        if c.manager is not None:  # Patroni puts its parameters on the command line
            src = {k: f"{v} ({c.manager.name.capitalize()})" if v == "command line" else v
                   for k, v in src.items()}
        # the settings the plan changes: the layer that wins, as the plan reads it
        src.update({k: lay.where for k, lay in c.layers.items() if k in s})
        shown["sources"] = {k: v for k, v in src.items() if v}
        version = s.get("server_version") or (str(c.major) if c.major else Unknown(
            f"the release of {iid}", "no connection said it and PG_VERSION was not read",
            "pass --dsn, or run as root (offline: a snapshot taken as root keeps PG_VERSION)"))
        where = c.datadir if known(c.datadir) else f"postmaster {c.pid}"
        return Instance(NAME, iid, where + (f" (port {c.port})" if c.port else ""), running,
                        pid=c.pid, owner=c.owner, version=version, settings=shown,
                        state=c)
