"""MySQL/MariaDB discovery: servers in the process table, their settings (over the socket, or
from the option files and command line), the buffers they hold on huge pages, and the fallback
warnings in their error log.

- When a large-page mapping fails the server logs "Couldn't allocate N bytes (Large/HugeTLB
  memory page size P); errno 12; continuing to smaller size" (mysys/my_largepage.c) and carries
  on with 4 KiB pages: the fallback is silent unless someone reads the log.
"""

from __future__ import annotations

import dataclasses
import os
import re
from urllib.parse import parse_qs, unquote, urlparse

from hpadvise.api.face import (Demand, HostFacts, InputError, Instance, Proc, ProcTable, SysRoot,
                               Targets, Unknown, as_seen_inside, backing_of, binary_version,
                               error_line, hugetlb_pages, proc_root, redact_dsn)

from .conf import (QUERY_VARS, OptionFileError, OptionFiles, cmdline_settings,
                   default_files, read_option_file, server_groups)
from .findings import CODES
from .layers import persisted, winning
from .errlog import fallback_lines, logged_version
from .origins import SHOWN, from_server, sources
from .preflight import would_start
from .sizing import allocations, bool_on, describe, pages_needed
from .versions import model
from .state import Server  # noqa: F401  (discovery makes them)

NAME = "mysql"
PROCESS_NAMES = ("mariadbd", "mysqld")
# Runs of the server binary that are no server: a data directory being made (MySQL 5.7+
# `--initialize[-insecure]`, MariaDB's install script `--bootstrap`) or an answer printed
# (`--help`, `--version`): they accept no connections and keep no buffer pool.
NOT_A_SERVER = ("--initialize", "--initialize-insecure", "--bootstrap", "--help", "--version",
                "-V", "-?")


def parse_dsn(dsn: str) -> dict:
    """mysql://user:password@host:port/ or mysql://user@localhost/?unix_socket=/path."""
    u = urlparse(dsn)
    if u.scheme not in ("mysql", "mariadb"):
        raise InputError(f"{redact_dsn(dsn)}: a MySQL DSN starts with mysql:// or mariadb://")
    q = parse_qs(u.query)
    kw: dict = {"user": unquote(u.username) if u.username else "root"}
    if u.password:
        kw["password"] = unquote(u.password)
    if "unix_socket" in q:
        kw["unix_socket"] = q["unix_socket"][0]
    else:
        kw["host"] = u.hostname or "127.0.0.1"
        try:
            kw["port"] = u.port or 3306
        except ValueError:  # urllib: "Port out of range" or not a number
            raise InputError(f"{redact_dsn(dsn)}: the port is not a number from 1 to 65535; "
                             "write mysql://user:password@host:3306/") from None
    return kw


def connect(server: Server | None = None, dsn: str | None = None, timeout: int = 3):
    """A connection over the server's socket as root (unix_socket authentication on Debian),
    or with a DSN (client.Connection: the host's client library, else mysql-connector). A
    server in its own root is reached through its socket there."""
    from .client import Connection
    sock = server.socket if server else None
    if sock and server.fs is not None and server.root is not None:
        sock = str(server.fs.path(sock))
    kw = parse_dsn(dsn) if dsn else {"unix_socket": sock, "user": "root"}
    return Connection(timeout, **kw)


def is_my_dsn(dsn: str) -> bool:
    return bool(re.match(r"^(mysql|mariadb)://", dsn))


def dsn_error(exc: Exception, dsn: str | None) -> str:
    """A driver's error as one line without the DSN's password, whatever the driver echoed."""
    if isinstance(exc, InputError):  # the DSN itself is wrong: its own line says how
        return str(exc)
    try:
        password = parse_dsn(dsn).get("password") if dsn else None
    except InputError:
        password = None
    return error_line(exc, dsn, password)


class Discovery:
    def __init__(self, connect_timeout: int = 3):
        self.connect_timeout = connect_timeout

    def discover(self, host: HostFacts, procs: ProcTable, targets: Targets) -> list[Instance]:
        sr = procs.sr
        servers = []
        mine = procs.by_name(*PROCESS_NAMES)
        pids = {p.pid for p in mine}
        for p in mine:
            if p.ppid in pids or not p.cmdline or \
                    any(a in NOT_A_SERVER for a in p.cmdline[1:]):
                continue
            servers.append(self._from_process(sr, procs, p))
        out = []
        used = set()
        for dsn in targets.dsns:
            if not is_my_dsn(dsn):
                continue
            match = self._by_dsn(dsn, servers)
            if isinstance(match, Instance):
                out.append(match)
                continue
            used.add(id(match))
            out.append(self._running(sr, procs, match, host, dsn))
        for s in servers:
            if id(s) not in used:
                out.append(self._running(sr, procs, s, host, None))
        return out

    def _from_process(self, sr: SysRoot, procs: ProcTable, p: Proc) -> Server:
        argv = p.cmdline
        owner = procs.owner(p)
        fs = procs.fs(p.pid)  # its files as it sees them: its own root's, if it has one
        s = Server(pid=p.pid, argv=argv, owner=owner, owner_uid=p.uid,
                   flavour="mariadb" if p.comm == "mariadbd" else "mysql",
                   cwd=sr.readlink(f"/proc/{p.pid}/cwd"), fs=fs, root=proc_root(fs),
                   ns_pid=p.ns_pid)
        s.cwd = as_seen_inside(s.root, s.cwd)  # the kernel names it as the host sees it
        parent = Proc(sr, p.ppid) if p.ppid else None
        if parent is not None and parent.comm in ("mysqld_safe", "mariadbd-safe") \
                and parent.cmdline:
            s.supervisor = (parent.pid, parent.cmdline)
        return s

    def _by_dsn(self, dsn: str, servers: list[Server]):
        probe = Server(pid=None)
        try:
            self._query(probe, dsn)
        except Exception as exc:
            inst = Instance(NAME, f"mysql:{redact_dsn(dsn)}", redact_dsn(dsn), False)
            inst.errors.append(f"cannot connect to {redact_dsn(dsn)}: "
                               f"{dsn_error(exc, dsn)}; check user, password, "
                               "host and port")
            return inst
        for s in servers:
            s_dir = s.cwd or s.datadir or cmdline_settings(s.argv).get("datadir", ("",))[0]
            if s_dir and os.path.realpath(s_dir) == os.path.realpath(probe.datadir or "\0"):
                return s
        probe.pid = None
        return probe

    def _read_files(self, sr: SysRoot, s: Server) -> None:
        """Option files and command line; what the server reported itself (origin "server")
        wins over them."""
        sr = s.fs or sr  # its own root's option files, not the host's
        files, extra = default_files(s.argv, None)
        groups = server_groups(s.flavour, s.vt)
        of = OptionFiles()
        for f in files + extra:
            read_option_file(sr, f, groups, of)
        s.options = of
        for k in [k for k, o in s.origins.items() if o != "server"]:
            s.settings.pop(k, None)
            s.origins.pop(k, None)
        merged = {**of.settings, **cmdline_settings(s.argv)}
        s.layers = {"large_pages": winning(sr, s.argv, s.datadir, of, "large_pages")}
        kept = persisted(sr, s.datadir, "large_pages")  # SET PERSIST outranks both
        if kept is not None:
            merged["large_pages"] = (kept, s.layers["large_pages"].where)
        s.next_start = {k: v for k, (v, _) in merged.items()}
        for k, (v, origin) in merged.items():
            if s.origins.get(k) != "server":
                s.settings[k], s.origins[k] = v, origin

    def _query(self, s: Server, dsn: str | None) -> None:
        with connect(s, dsn, self.connect_timeout) as conn:
            allv = {k.lower(): v for k, v in conn.execute("SHOW GLOBAL VARIABLES")}
            for k in QUERY_VARS:
                if k in allv:
                    s.settings[k] = str(allv[k])
                    s.origins[k] = "server"
            s.connected_as = conn.execute("SELECT CURRENT_USER()")[0][0]
            if "mariadb" not in str(allv.get("version", "")).lower():
                s.sources = from_server(conn)  # MySQL 8.0+ says where each came from
            s.engines = tuple(r[0].lower() for r in conn.execute(
                "SELECT ENGINE FROM information_schema.ENGINES "
                "WHERE SUPPORT IN ('YES', 'DEFAULT')"))
            if "innodb" not in s.engines:
                s.settings["innodb"], s.origins["innodb"] = "OFF", "server"
            try:  # exact block counts: used + unused = all blocks (mf_keycache.c)
                rows = conn.execute(
                    "SELECT SEGMENT_NUMBER, USED_BLOCKS + UNUSED_BLOCKS FROM "
                    "information_schema.KEY_CACHES WHERE KEY_CACHE_NAME = 'default'")
                segs = [int(b) for n, b in rows if n is not None]
                total = [int(b) for n, b in rows if n is None]
                if segs or total:
                    s.counted["key_cache"] = segs or total
            except Exception:
                pass  # MySQL has no KEY_CACHES table: the formula estimates it
            st = {k.lower(): int(v) for k, v in conn.execute(
                "SHOW GLOBAL STATUS LIKE 'Aria_pagecache_blocks_u%'")}
            if len(st) == 2:
                s.counted["aria"] = [sum(st.values())]
        s.version = s.settings.get("version") or s.version
        if "mariadb" in (s.version or "").lower():
            s.flavour = "mariadb"
        s.datadir = s.settings.get("datadir", s.datadir)
        if s.settings.get("port", "").isdigit():
            s.port = int(s.settings["port"])
        s.socket = s.settings.get("socket") or s.socket

    def _running(self, sr: SysRoot, procs: ProcTable, s: Server, host: HostFacts,
                 dsn: str | None) -> Instance:
        errors: list[str] = []
        # known before the files are read: SET PERSIST's file is in the data directory
        s.datadir = s.cwd or cmdline_settings(s.argv).get("datadir", (None,))[0] or s.datadir
        try:
            self._read_files(sr, s)
        except OptionFileError as exc:
            errors.append(str(exc))
        # mysqld changes into its data directory at start (sql/mysqld.cc, my_setwd), so its
        # cwd names the datadir even when no option says it.
        s.datadir = s.cwd or s.settings.get("datadir") or s.datadir or "/var/lib/mysql"
        s.socket = s.settings.get("socket") or "/run/mysqld/mysqld.sock"
        if s.settings.get("port", "").isdigit():
            s.port = int(s.settings["port"])
        note = None
        if s.pid is not None:
            if not sr.live:
                note = "offline audit of a snapshot"
            elif errors:
                note = "option files unreadable: not connecting to a guessed socket"
            elif getattr(s.fs, "hidden", False):  # roots.HiddenView: its root, not the host's
                note = ("it runs in a root of its own, which only root can enter: its option "
                        "files unread, and no socket of the same name on the host taken for "
                        "its own (run as root)")
            else:
                expected = s.datadir
                fs = s.fs or sr  # both directories as the server sees them
                try:
                    self._query(s, dsn)
                    if os.path.realpath(fs.path(s.datadir.rstrip("/"))) != \
                            os.path.realpath(fs.path(expected.rstrip("/"))):
                        raise RuntimeError(f"the server on {s.socket} serves {s.datadir}, not "
                                           f"{expected}")
                except Exception as exc:
                    msg = dsn_error(exc, dsn)
                    if dsn:
                        errors.append(f"cannot connect to {redact_dsn(dsn)}: {msg}")
                    note = msg
                    s.datadir = expected
        if s.version is None and s.pid and sr.live:
            s.version = binary_version(sr, s.pid, r"Ver\s+(\S+)", ("--no-defaults", "--version"))
        elif s.version is None and s.pid:  # a snapshot runs nothing: the server's own log
            s.version = logged_version(sr, s)
            if s.version and "mariadb" in s.version.lower():
                s.flavour = "mariadb"
        if s.version and s.options.versioned and not errors:
            try:  # [mysqld-X.Y] groups apply to this version only: read again knowing it
                self._read_files(sr, s)
            except OptionFileError as exc:
                errors.append(str(exc))
        inst = self._instance(s, running=True)
        inst.errors += errors
        if sr.live and s.pid and not errors and s.root is None:  # its binary runs in its root
            self._would_start(inst, s, sr)
        if s.pid is None:
            inst.findings.append(CODES["my.not_local"](
                "Its huge pages must be reserved on the host that runs it; the demand below is "
                "computed from its settings.", f"datadir={s.datadir}", inst.id))
        if note:
            inst.findings.append(CODES["my.no_connection"](
                "Without a connection the values come from my.cnf and its includes and the "
                "command line, and cache block counts are estimated. " + sr.or_offline(
                    "Pass --dsn mysql://user:password@host:port/ to connect."), note, inst.id,
                title="Settings read from its command line only (its root is out of reach)"
                if getattr(s.fs, "hidden", False) else None))
        if not errors:
            try:
                self._observe(inst, s, sr, procs, host)
                self._size(inst, s, host)
            except OptionFileError as exc:
                inst.errors.append(str(exc))
        return inst

    def _would_start(self, inst: Instance, s: Server, sr: SysRoot) -> None:
        """An option file changed after the server started: would it start again? Its own
        parser says (preflight.would_start); unchanged files need no asking."""
        started = Proc(sr, s.pid).started_at
        changed = []
        for f in s.options.files:
            try:
                # a file written as the server started (by what started it: 30 ms after its
                # start time here, which is known to a clock tick) is not a change since
                if started and os.stat(sr.path(f)).st_mtime > started + 0.5:
                    changed.append(f)
            except OSError:
                continue
        if not changed:
            return
        exe = sr.readlink(f"/proc/{s.pid}/exe")
        ok, why = would_start(s.argv, exe.removesuffix(" (deleted)") if exe else None, s.owner)
        if ok is not False:
            return
        inst.errors.append(f"{inst.id}: its option files have errors, so it would not start "
                           f"again: {why}; fix them before it restarts")
        inst.findings.append(CODES["my.config.broken"](
            "The server runs with the options it read when it started, but "
            f"{', '.join(changed)} changed since: a restart (by anyone, or a reboot) would "
            "fail. apply restarts nothing until they are fixed.", why, inst.id))

    def _instance(self, s: Server, running: bool) -> Instance:
        networked = s.settings.get("skip_networking", "OFF").upper() in ("OFF", "0") \
            and s.port is not None
        iid = f"mysql:{s.port}" if networked else \
            f"mysql:{s.datadir}" if s.datadir else f"mysql:pid{s.pid}"
        shown = {k: s.settings[k] for k in SHOWN if k in s.settings}
        shown["data_directory"] = s.datadir or Unknown(
            "its data directory", "neither a connection, its command line nor its working "
            "directory said", "pass --dsn, or run as root (offline: a snapshot taken as "
            "root keeps its working directory)").as_json()
        if s.root is not None:  # its paths and users are those of its own root
            shown["root"] = s.root.describe()
        shown["sources"] = sources(s.fs, s, shown) if s.fs is not None else \
            {k: lay.where for k, lay in s.layers.items()}
        if s.port:
            shown["port"] = s.port
        shown["flavour"] = s.flavour
        where = s.datadir or f"{s.flavour} process {s.pid}"
        m = model(s.flavour, s.vt)  # large pages, or the key cache's, in SysV shared memory
        sysv = bool_on(s.settings.get("large_pages")) and (m.sysv or m.has("key_cache_sysv"))
        return Instance(NAME, iid, f"{where} ({s.flavour}" + (f", port {s.port})" if s.port
                                                              else ")"),
                        running, pid=s.pid, owner=s.owner, settings=shown, state=s,
                        version=s.version or Unknown(
                            f"the release of {iid}", "no connection said it, and neither its "
                            "binary nor its error log was read", "pass --dsn, or run as root (offline: a "
                            "snapshot taken as root keeps its error log, which names it)"),
                        shm_sysv=sysv)

    def _observe(self, inst: Instance, s: Server, sr: SysRoot, procs: ProcTable,
                 host: HostFacts) -> None:
        if not s.pid:
            return
        p = Proc(sr, s.pid)
        maps = p.smaps
        if maps is None:
            s.observe_note = f"smaps unreadable: run as root or as {s.owner}"
        else:
            s.huge_maps = [m for m in maps if m.hugetlb]
            # a release the rules do not place there (early 8.0) seen doing it: SysV segments
            inst.shm_sysv = inst.shm_sysv or any(m.path.startswith("/SYSV") for m in s.huge_maps)
            b = backing_of(maps, host.thp.pmd_size_kb, host.base_page_bytes // 1024)
            inst.backing, inst.backing_page_kb = b.kind, b.page_kb
            s.anon_huge_kb = sum(m.anon_huge_kb for m in maps)
        s.thp_enabled = p.status.get("THP_enabled")
        where = model(s.flavour, s.vt).sizes_from
        if s.root is not None and s.fs is not None and not s.fs.exists(where):
            s.sizes_hidden = where
        inst.page_tables_kb = p.vm_pte_kb
        s.fallback = fallback_lines(sr, s)

    def _size(self, inst: Instance, s: Server, host: HostFacts) -> None:
        page_kb = host.default_hugepage_kb or 2048
        allocs = allocations(s.settings, s.flavour, s.vt, s.counted)
        sizes = sorted(set(host.page_sizes_kb) | {page_kb})
        pages = {kb_: pages_needed(allocs, kb_) for kb_ in sizes}
        exact = all(a.exact for a in allocs) and bool(s.vt)
        held = hugetlb_pages(s.huge_maps).get(page_kb, 0)
        parts = describe(allocs)
        inst.demand = Demand(inst.id, sum(a.bytes for a in allocs), page_kb, pages, exact,
                             f"large-page allocations of {model(s.flavour, s.vt).summary()}: "
                             f"{parts}",
                             selectable=False, held_pages=held)
        s.allocations = allocs
        s.required_pages = pages_needed([a for a in allocs if not a.allowance], page_kb)
        if inst.backing == "hugetlb" and held < s.required_pages and \
                bool_on(s.settings.get("large_pages")):
            inst.demand = dataclasses.replace(inst.demand, short=True)  # fell back in part

