"""PostgreSQL: discover clusters, count the huge pages their shared memory needs, and check that
they really run on them.

Facts this module relies on (cited where used):
- PG >= 15 computes the count itself: shared_memory_size_in_huge_pages =
  floor(shared memory bytes / huge page size) + 1 (src/backend/storage/ipc/ipci.c,
  InitializeShmemGUCs). `postgres -C` reports it for a stopped cluster only ("lock file
  postmaster.pid already exists" otherwise), and must run as the cluster owner.
- The main segment is an anonymous shared mmap (src/backend/port/sysv_shmem.c,
  CreateAnonymousSharedMemory): "/anon_hugepage (deleted)" on hugetlb, "/dev/zero (deleted)"
  otherwise. Being shared anonymous memory, THP reaches it through shmem_enabled, not enabled
  (Documentation/admin-guide/mm/transhuge.rst).
- huge_pages=try falls back to normal pages logging only at DEBUG1 (sysv_shmem.c), so the truth
  is the postmaster's smaps.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from hpadvise.actions import Action, ActionError, File, Restart, ServerSetting
from hpadvise.engines import Change, Demand, Engine, Finding, Instance, Targets, redact_dsn
from hpadvise.errors import InputError
from hpadvise.host import HostFacts
from hpadvise.procs import Mapping, Proc, ProcTable, systemd_unit
from hpadvise.profiles import Profile
from hpadvise.sizing import fmt_bytes, fmt_page
from hpadvise.sysroot import SysRoot

DOCS = "PostgreSQL docs, 19.4.5 Linux Huge Pages"
BLCKSZ = 8192  # default block size; the real one is read from block_size when connected

# GUCs whose change alters the shared memory size (and so the page count) after a restart.
SHMEM_GUCS = ("shared_buffers", "max_connections", "huge_page_size", "wal_buffers",
              "max_worker_processes", "max_wal_senders", "autovacuum_max_workers",
              "max_locks_per_transaction", "max_prepared_transactions",
              "min_dynamic_shared_memory", "max_pred_locks_per_transaction")

QUERY_GUCS = SHMEM_GUCS + (
    "huge_pages", "shared_memory_size", "shared_memory_size_in_huge_pages", "shared_memory_type",
    "data_directory", "config_file", "port", "server_version", "server_version_num",
    "block_size", "wal_block_size", "unix_socket_directories")

# PostgreSQL memory units are case-sensitive (src/backend/utils/misc/guc.c, memory_unit_conversion_table).
PG_UNITS = {"B": 1, "kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
# Default unit of the memory GUCs hpadvise reads (the "unit" column of pg_settings).
GUC_UNIT_BYTES = {"shared_buffers": BLCKSZ, "wal_buffers": BLCKSZ, "huge_page_size": 1 << 10,
                  "min_dynamic_shared_memory": 1 << 20}
# Defaults of PostgreSQL 15 (postgresql.conf.sample), used when a stopped cluster's config
# does not set them.
DEFAULTS = {"shared_buffers": "128MB", "max_connections": "100", "huge_pages": "try",
            "huge_page_size": "0", "wal_buffers": "-1", "max_worker_processes": "8",
            "max_wal_senders": "10", "autovacuum_max_workers": "3",
            "max_locks_per_transaction": "64", "max_prepared_transactions": "0",
            "shared_memory_type": "mmap", "port": "5432", "min_dynamic_shared_memory": "0"}


# --------------------------------------------------------------------------- config files

class ConfError(InputError):
    pass


class ConfUnreadable(ConfError):
    """Permission denied: a limit of who runs hpadvise, not bad input."""


_TOKEN = re.compile(r"""\s*(?P<name>[A-Za-z_][\w.]*)\s*=?\s*(?P<value>'(?:[^'\\]|''|\\.)*'|[^\s#']+)?\s*(?:#.*)?$""")


def _unquote(v: str) -> str:
    if v.startswith("'") and v.endswith("'") and len(v) >= 2:
        return re.sub(r"''|\\(.)", lambda m: "'" if m.group(0) == "''" else m.group(1), v[1:-1])
    return v


def read_conf(sr: SysRoot, path: str, out: dict[str, tuple[str, str]] | None = None,
              depth: int = 0) -> dict[str, tuple[str, str]]:
    """Settings of a postgresql.conf and everything it includes, later lines winning, as
    {name: (value, "file:line")}. Grammar: src/backend/utils/misc/guc-file.l; includes and
    the depth limit of 10: CONF_FILE_MAX_DEPTH in guc.h."""
    out = {} if out is None else out
    if depth > 10:
        raise ConfError(f"{path}: includes nested more than 10 deep (an include loop?)")
    text = sr.read(path)
    if text is None:
        reason = sr.notes[-1].reason if sr.notes else "unreadable"
        cls = ConfUnreadable if "permission denied" in reason else ConfError
        raise cls(f"cannot read {path}: {reason}")
    here = os.path.dirname(path)
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        mt = _TOKEN.match(line)
        if not mt or mt.group("value") is None:
            raise ConfError(f"{path}:{n}: syntax error in {line.strip()[:60]!r}; "
                            "expected name = value")
        name, value = mt.group("name").lower(), _unquote(mt.group("value"))
        if name in ("include", "include_if_exists", "include_dir"):
            target = value if os.path.isabs(value) else os.path.join(here, value)
            if name == "include_dir":
                for f in sr.listdir(target, quiet_missing=False):
                    if f.endswith(".conf") and not f.startswith("."):
                        read_conf(sr, f"{target}/{f}", out, depth + 1)
            elif name == "include" or sr.exists(target):
                read_conf(sr, target, out, depth + 1)
            continue
        out[name] = (value, f"{path}:{n}")
    return out


def parse_memory(name: str, value: str, where: str = "") -> int:
    """A memory GUC value in bytes. PostgreSQL's rules: an integer in the GUC's own unit, or a
    number followed by one of B, kB, MB, GB, TB (case-sensitive)."""
    mt = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", value)
    if not mt or (mt.group(2) and mt.group(2) not in PG_UNITS):
        raise ConfError(f"{where + ': ' if where else ''}invalid value for {name}: {value!r}; "
                        'valid units are "B", "kB", "MB", "GB" and "TB" (case-sensitive)')
    unit = PG_UNITS[mt.group(2)] if mt.group(2) else GUC_UNIT_BYTES.get(name, 1)
    return int(float(mt.group(1)) * unit)


def parse_int(name: str, value: str, where: str = "") -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfError(f"{where + ': ' if where else ''}invalid value for {name}: {value!r}; "
                        "expected an integer") from None


def page_kb_of(huge_page_size: int, host: HostFacts) -> int | None:
    """The page size PostgreSQL will ask for: huge_page_size, or 0 = the kernel's default size
    (GetHugePageSize in sysv_shmem.c reads Hugepagesize from /proc/meminfo)."""
    return huge_page_size // 1024 if huge_page_size else host.default_hugepage_kb


# --------------------------------------------------------------------------- sizing

def pages_from_bytes(size_b: int, page_kb: int) -> int:
    """ipci.c InitializeShmemGUCs: hp_required = size_b / hp_size + 1."""
    return size_b // (page_kb * 1024) + 1


def documented_estimate(s: dict[str, int]) -> int:
    """Shared memory bytes for PG <= 14, which cannot report it: the per-item costs of the
    PostgreSQL 9.2 docs, Table 17-2 "PostgreSQL Shared Memory Usage" (connections and
    autovacuum workers (1800 + 270 * max_locks_per_transaction) each, prepared transactions
    (770 + 270 * max_locks_per_transaction), buffers (block_size + 208), WAL buffers
    (wal_block_size + 8), 770 kB fixed). Background workers and WAL senders count as
    connections since 9.4. The table predates structures added since (SLRU buffers,
    statistics, predicate locks): measured against PostgreSQL 15's own shared_memory_size on
    this project's machine, they add ~28 kB per backend slot and ~2 MiB fixed, which are added
    here so the estimate errs high. An estimate: verify with smaps after the first start."""
    per_conn = 1800 + 270 * s["max_locks_per_transaction"] + 28 * 1024
    conns = (s["max_connections"] + s["autovacuum_max_workers"] + 1 + s["max_worker_processes"]
             + s["max_wal_senders"])
    buffers = s["shared_buffers"] // BLCKSZ
    wal = s["wal_buffers"]
    if wal < 0:  # -1: 1/32 of shared_buffers, between 64 kB and one 16 MB WAL segment (xlog.c)
        wal = min(max(s["shared_buffers"] // 32, 64 << 10), 16 << 20)
    return (per_conn * conns + (770 + 270 * s["max_locks_per_transaction"])
            * s["max_prepared_transactions"] + (BLCKSZ + 208) * buffers
            + (BLCKSZ + 8) * (wal // BLCKSZ) + 770 * 1024 + (2 << 20)
            + s["min_dynamic_shared_memory"])


# --------------------------------------------------------------------------- discovery

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
    pending_restart: tuple[str, ...] = ()
    connected_as: str | None = None


def _arg(argv: tuple[str, ...], guc: str, short: str | None = None) -> str | None:
    """Value of `-D dir`, `-Ddir` or `-c guc=value` / `--guc=value` on a postgres command line."""
    for i, a in enumerate(argv):
        if short and a == short and i + 1 < len(argv):
            return argv[i + 1]
        if short and a.startswith(short) and len(a) > 2:
            return a[2:]
        if a == "-c" and i + 1 < len(argv) and argv[i + 1].startswith(guc + "="):
            return argv[i + 1].split("=", 1)[1]
        if a.startswith(f"--{guc}="):
            return a.split("=", 1)[1]
    return None


def _postmasters(procs: ProcTable) -> list[Proc]:
    pg = procs.by_name("postgres", "postmaster")
    pids = {p.pid for p in pg}
    return [p for p in pg if p.ppid not in pids]


def _secret_free(text: str, dsn: str | None) -> str:
    """Remove a DSN's password from a driver message, whatever the driver echoed."""
    if not dsn:
        return text
    try:
        from psycopg.conninfo import conninfo_to_dict
        pw = conninfo_to_dict(dsn).get("password")
    except Exception:
        pw = None
    text = text.replace(dsn, redact_dsn(dsn))
    return text.replace(str(pw), "***") if pw else text


# --------------------------------------------------------------------------- shared memory and connections

def main_segment(maps: list[Mapping] | None) -> Mapping | None:
    """The main shared memory segment among a postmaster's shared mappings: the largest one
    (sysv_shmem.c maps one anonymous segment; the SysV key segment is a few bytes)."""
    shared = [m for m in maps or [] if m.shared and m.size_kb >= 1024]
    return max(shared, key=lambda m: m.size_kb) if shared else None


def backing_of(m: Mapping) -> str:
    """hugetlb, thp (shmem THP maps part of it by PMD) or 4k."""
    return "hugetlb" if m.hugetlb else ("thp" if m.shmem_pmd_kb else "4k")


def connect_socket(socket_dir: str | None, port: int | None, user: str | None,
                   timeout: int):
    """A psycopg connection over a cluster's unix socket (imported only when needed)."""
    import psycopg
    return psycopg.connect(host=socket_dir or "/var/run/postgresql", port=port or 5432,
                           user=user, dbname="postgres", autocommit=True,
                           connect_timeout=timeout, application_name="hpadvise")


# --------------------------------------------------------------------------- apply

def _spec_of(c: Cluster) -> dict:
    return {"engine": "postgres", "datadir": c.datadir, "port": c.port,
            "socket_dir": c.socket_dir, "owner": c.owner, "config_file": c.config_file,
            "major": c.major}


class PgSetting(ServerSetting):
    """One setting in postgresql.auto.conf: set with ALTER SYSTEM over the socket (or, when
    that fails, by rewriting postgresql.auto.conf atomically); restored by putting the file's
    old bytes back. Takes effect at the next restart (huge_pages and huge_page_size are
    postmaster-context settings)."""
    kind = "pg_setting"
    how = "ALTER SYSTEM"

    def __init__(self, name: str, value: str, **cluster):
        self.name, self.value, self.c = name, value, cluster

    def spec(self) -> dict:
        return {**self.c, "kind": self.kind, "name": self.name, "value": self.value}

    @property
    def auto_conf(self) -> str:
        return f"{self.c['datadir']}/postgresql.auto.conf"

    @property
    def label(self) -> str:
        return f"{self.name} (postgres:{self.c.get('port') or self.c['datadir']})"

    def _file(self) -> File:
        st = os.stat(self.c["datadir"])
        return File(self.auto_conf, 0o600, st.st_uid, st.st_gid)

    def get(self) -> dict:
        raw = self._file().get()
        value = None
        if raw is not None:
            sr = SysRoot("/")
            value = read_conf(sr, self.auto_conf).get(self.name, (None,))[0]
        return {"value": value, "file": raw}

    def set(self, value: dict) -> None:
        try:
            with connect_socket(self.c.get("socket_dir"), self.c.get("port"),
                                self.c.get("owner"), 5) as conn:
                from psycopg import sql
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(
                    sql.Identifier(self.name), sql.Literal(value["value"])))
            return
        except Exception:
            pass  # not running, or no connection: edit the file as PostgreSQL would
        cur = File.decode(self._file().get()) or \
            "# Do not edit this file manually!\n# It will be overwritten by the ALTER SYSTEM command.\n"
        lines = [ln for ln in cur.splitlines() if not re.match(rf"\s*{self.name}\s*=", ln, re.I)]
        lines.append(f"{self.name} = '{value['value']}'")
        self._file().set(File.encode("\n".join(lines) + "\n"))

    def verify(self, value: dict) -> tuple[bool, dict]:
        actual = self.get()
        return actual["value"] == value["value"], actual

    def restore(self, old: dict) -> None:
        self._file().set(old["file"])

    def same(self, old: dict, new: dict) -> bool:
        return old["value"] == new["value"]


class PgRestart(Restart):
    """Restart a cluster and check from smaps that shared memory landed on huge pages.
    Through the service manager when the cluster is a service (systemd unit, Debian's
    pg_ctlcluster), otherwise pg_ctl as the cluster owner."""
    kind = "pg_restart"

    @property
    def c(self) -> dict:
        return self.s

    @property
    def label(self) -> str:
        return f"restart postgres:{self.c.get('port') or self.c['datadir']}"

    def command(self, log: str | None = None) -> tuple[list[str], dict]:
        """The restart command and subprocess arguments (pg_ctl logs to `log`)."""
        conf = self.c.get("config_file") or ""
        mt = re.fullmatch(r"/etc/postgresql/([^/]+)/([^/]+)/postgresql\.conf", conf)
        pid = _read_pid(self.c["datadir"])
        unit = systemd_unit(pid) if pid else None
        if unit:
            return ["systemctl", "restart", unit], {}
        if mt and os.path.exists("/usr/bin/pg_ctlcluster"):
            return ["pg_ctlcluster", mt.group(1), mt.group(2), "restart"], {}
        import pwd
        pw = pwd.getpwnam(self.c["owner"])
        binary = os.path.join(os.path.dirname(_postgres_binary(self.c.get("major")) or ""),
                              "pg_ctl")
        kw: dict = {"cwd": "/"}
        if os.geteuid() == 0:
            kw.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
        cmd = [binary, "-D", self.c["datadir"], "-w", "-t", "300", "-m", "fast"]
        # pg_ctl must not keep our stdout: the server inherits it. Log to a file instead.
        return cmd + (["-l", log] if log else []) + ["restart"], kw

    def set(self, value=True) -> None:
        import pwd
        import tempfile
        fd, log = tempfile.mkstemp(prefix="hpadvise-restart-", suffix=".log")
        os.close(fd)
        pw = pwd.getpwnam(self.c["owner"])
        os.chown(log, pw.pw_uid, pw.pw_gid)
        cmd, kw = self.command(log)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
        except (OSError, subprocess.TimeoutExpired) as exc:
            os.unlink(log)
            raise ActionError(f"{self.label}: {exc}") from None
        try:
            tail = Path(log).read_text()
        finally:
            os.unlink(log)
        if r.returncode != 0:
            fatal = [ln for ln in (tail + r.stderr).splitlines() if "FATAL" in ln]
            why = fatal[-1].split("FATAL:", 1)[-1].strip() if fatal else r.stderr.strip()[-300:]
            raise ActionError(f"{self.label} failed: {why}")

    def verify(self, value=True) -> tuple[bool, str]:
        pid = _read_pid(self.c["datadir"])
        if not pid:
            return False, "not running"
        from hpadvise.procs import Proc
        m = main_segment(Proc(SysRoot("/"), pid).shared_mappings)
        if m is None:
            return False, "no shared memory segment found in smaps"
        if m.hugetlb:
            return True, f"on {fmt_page(m.kernel_page_kb)} huge pages ({m.path})"
        return False, f"shared memory on 4 KiB pages ({m.path})"

def _read_pid(datadir: str) -> int | None:
    try:
        pid = int(Path(f"{datadir}/postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if os.path.exists(f"/proc/{pid}") else None


class PostgresEngine(Engine):
    """PostgreSQL: static huge pages for the main shared memory segment.

    Sizing: `shared_memory_size_in_huge_pages` (PG >= 15) from the running server or from
    `postgres -C` on a stopped one; PG <= 14 gets the documented estimate or, when running, the
    size of its shared mapping. Recommends `huge_pages = on`: `try` falls back silently."""

    name = "postgres"
    description = "PostgreSQL (shared_buffers and the rest of the main shared memory segment)"
    process_names = ("postgres", "postmaster")
    profile_schema = {"huge_pages": (str, ("on", "try", "off"), "on")}

    def __init__(self, connect_timeout: int = 3):
        self.connect_timeout = connect_timeout
        self._live = True

    # ---- discover
    def discover(self, host: HostFacts, procs: ProcTable, targets: Targets) -> list[Instance]:
        sr = procs.sr
        self._live = sr.live
        clusters: list[Cluster] = []
        for pm in _postmasters(procs):
            if not pm.cmdline:  # exited while we looked (or a zombie): nothing to inspect
                continue
            clusters.append(self._from_process(sr, procs, pm))
        out: list[Instance] = []
        dsn_for: dict[int, str] = {}
        extra: list[Instance] = []
        for dsn in targets.dsns:
            if not _is_pg_dsn(dsn):
                continue
            inst = self._from_dsn(dsn, clusters, dsn_for, host, procs)
            if inst is not None:
                extra.append(inst)
        for d in targets.datadirs:
            real = os.path.realpath(d)
            if any(os.path.realpath(c.datadir) == real for c in clusters if c.datadir):
                continue
            extra.append(self._stopped(sr, procs, d, host))
        for i, c in enumerate(clusters):
            out.append(self._running(sr, procs, c, host, dsn_for.get(i)))
        return out + extra

    def _from_process(self, sr: SysRoot, procs: ProcTable, pm: Proc) -> Cluster:
        argv = pm.cmdline
        datadir = _arg(argv, "data_directory", "-D")
        if datadir is None:
            env = pm.environ() or {}
            datadir = env.get("PGDATA")
        c = Cluster(datadir=datadir or "?", pid=pm.pid, owner=procs.user(pm.uid),
                    owner_uid=pm.uid, config_file=_arg(argv, "config_file"))
        port = _arg(argv, "port", "-p")
        if datadir:
            pidfile = sr.read(f"{datadir}/postmaster.pid", quiet_missing=True)
            if pidfile:
                # Layout: src/include/utils/pidfile.h (LOCK_FILE_LINE_*).
                lines = pidfile.splitlines()
                if len(lines) >= 5:
                    port = port or lines[3].strip()
                    c.socket_dir = lines[4].strip() or None
            ver = sr.read(f"{datadir}/PG_VERSION", quiet_missing=True)
            if ver and ver.strip().isdigit():
                c.major = int(ver.strip())
        c.port = int(port) if port and port.isdigit() else None
        return c

    def _connect(self, c: Cluster, dsn: str | None):
        if dsn:
            import psycopg  # imported only when there is a server to talk to
            return psycopg.connect(dsn, connect_timeout=self.connect_timeout,
                                   application_name="hpadvise", autocommit=True)
        return connect_socket(c.socket_dir, c.port, c.owner, self.connect_timeout)

    def _query(self, conn, c: Cluster) -> None:
        rows = conn.execute(
            "SELECT name, setting, unit, pending_restart FROM pg_settings WHERE name = ANY(%s)",
            [list(QUERY_GUCS)]).fetchall()
        pending = []
        for name, setting, unit, pend in rows:
            c.settings[name] = _with_unit(setting, unit)
            c.origins[name] = "server"
            if pend:
                pending.append(name)
        try:
            # pending_restart flips only at a reload; pg_file_settings re-reads the files now,
            # so an ALTER SYSTEM not yet reloaded shows too ("applied" false = needs restart).
            # Earlier lines overridden by later ones are "not applied" too: last one per name.
            rows = conn.execute(
                "SELECT DISTINCT ON (name) name, applied, error FROM pg_file_settings "
                "WHERE name = ANY(%s) ORDER BY name, seqno DESC", [list(QUERY_GUCS)]).fetchall()
            # A postmaster-context change reads "setting could not be applied" (guc-file.l).
            pending += [n for n, applied, err in rows if not applied and n not in pending
                        and err in (None, "setting could not be applied")]
        except Exception:
            pass  # needs superuser or pg_read_all_settings
        c.pending_restart = tuple(pending)
        c.connected_as = conn.info.user
        if c.settings.get("data_directory"):
            c.datadir = c.settings["data_directory"]
        if c.settings.get("port", "").isdigit():
            c.port = int(c.settings["port"])
        vnum = c.settings.get("server_version_num", "")
        if vnum.isdigit():
            c.major = int(vnum) // 10000

    def _from_dsn(self, dsn, clusters, dsn_for, host, procs) -> Instance | None:
        probe = Cluster(datadir="?")
        try:
            with self._connect(probe, dsn) as conn:
                self._query(conn, probe)
        except Exception as exc:
            inst = Instance(self.name, f"postgres:{redact_dsn(dsn)}", redact_dsn(dsn), running=False)
            inst.errors.append(f"cannot connect to {redact_dsn(dsn)}: "
                               f"{_secret_free(_first_line(exc), dsn)}; check host, port, user "
                               "and password (or PGPASSWORD / ~/.pgpass)")
            return inst
        for i, c in enumerate(clusters):
            if c.datadir != "?" and os.path.realpath(c.datadir) == os.path.realpath(probe.datadir):
                dsn_for[i] = dsn
                return None
        # A server this host does not run (remote, or another container): report its settings.
        probe.pid = None
        inst = self._instance(probe, host, running=True)
        inst.id = f"postgres:{redact_dsn(dsn)}"
        inst.findings.append(Finding(
            "info", "pg.not_local", "Server is not running on this host",
            "Its huge pages must be reserved on the host that runs it; the demand below is "
            "computed from its settings.", f"data_directory={probe.datadir}", instance=inst.id))
        self._size_running(inst, probe, host, None)
        return inst

    def _running(self, sr, procs, c: Cluster, host, dsn: str | None) -> Instance:
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
                    self._query(conn, c)
                if expected != "?" and os.path.realpath(c.datadir) != os.path.realpath(expected):
                    raise RuntimeError(f"the server on that socket serves {c.datadir}, "
                                       f"not {expected}")
            except Exception as exc:
                msg = _secret_free(_first_line(exc), dsn)
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
            except ConfUnreadable as exc:
                unreadable = str(exc)
            except ConfError as exc:
                conf_error = str(exc)
        inst = self._instance(c, host, running=True)
        if note is not None:
            inst.findings.append(Finding(
                "info", "pg.no_connection", "Settings read from the configuration files"
                + ("" if not sr.live else f" (could not connect as {c.owner})"),
                "Without a connection the running values are read from postgresql.conf, "
                "postgresql.auto.conf and their includes, which may differ from what the server "
                "loaded. Pass --dsn to connect as another user.", note, instance=inst.id))
        if conf_error:
            inst.errors.append(conf_error)
        if unreadable:
            inst.findings.append(Finding(
                "info", "pg.unreadable", "Cannot size this instance as this user",
                "Neither a connection nor the configuration files were available; run as root "
                f"or as {c.owner}, or pass --dsn.", unreadable, instance=inst.id))
            c.settings.clear()
        self._observe(inst, procs, host)
        self._size_running(inst, c, host, inst.private.get("shm_mapping"))
        return inst

    def _stopped(self, sr: SysRoot, procs: ProcTable, datadir: str, host: HostFacts) -> Instance:
        c = Cluster(datadir=datadir)
        inst = Instance(self.name, f"postgres:{datadir}", datadir, running=False)
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
            self._read_files(sr, c)
        except ConfError as exc:
            inst.errors.append(str(exc))
            return inst
        inst = self._instance(c, host, running=False)
        inst.label = datadir
        inst.id = f"postgres:{datadir}"
        self._size_stopped(inst, c, host)
        return inst

    def _read_files(self, sr: SysRoot, c: Cluster) -> None:
        if c.datadir == "?" and not c.config_file:
            raise ConfError(f"cannot tell the data directory of postmaster {c.pid} (no -D, "
                            "PGDATA unreadable); run as root or pass --dsn")
        conf = c.config_file or f"{c.datadir}/postgresql.conf"
        if not c.config_file and not sr.exists(conf):
            conf = _debian_conf(sr, c.datadir) or conf
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
        if c.settings["huge_pages"] not in ("on", "off", "try"):
            raise ConfError(f"{c.origins['huge_pages']}: invalid value for huge_pages: "
                            f"{c.settings['huge_pages']!r}; use on, off or try")
        if c.port is None and c.settings.get("port", "").isdigit():
            c.port = int(c.settings["port"])

    def _instance(self, c: Cluster, host: HostFacts, running: bool) -> Instance:
        iid = f"postgres:{c.port}" if running and c.port else f"postgres:{c.datadir}"
        s = c.settings
        shown = {k: s[k] for k in ("shared_buffers", "huge_pages", "huge_page_size",
                                   "max_connections", "shared_memory_size",
                                   "shared_memory_size_in_huge_pages", "shared_memory_type")
                 if k in s}
        shown["data_directory"] = c.datadir
        if c.port:
            shown["port"] = c.port
        if c.pending_restart:
            shown["pending_restart"] = list(c.pending_restart)
        version = s.get("server_version") or (str(c.major) if c.major else None)
        return Instance(self.name, iid, f"{c.datadir} (port {c.port or '?'})", running,
                        pid=c.pid, owner=c.owner, version=version, settings=shown,
                        private={"cluster": c})

    # ---- what it runs on now
    def _observe(self, inst: Instance, procs: ProcTable, host: HostFacts) -> None:
        pm = Proc(procs.sr, inst.pid) if inst.pid else None
        if pm is None:
            return
        maps = pm.shared_mappings
        if maps is None:
            inst.private["observe_note"] = ("smaps unreadable: run as root or as "
                                            f"{inst.owner} to verify the backing")
        else:
            m = main_segment(maps)
            if m is not None:
                inst.private["shm_mapping"] = m
                inst.backing = backing_of(m)
                inst.backing_page_kb = {"hugetlb": m.kernel_page_kb,
                                        "thp": host.thp.pmd_size_kb}.get(
                                            inst.backing, host.base_page_bytes // 1024)
        members = [pm] + procs.children(inst.pid)
        ptes = [p.vm_pte_kb for p in members if p.vm_pte_kb is not None]
        if ptes:
            inst.page_tables_kb = sum(ptes)
            # Page-table cost of the shared memory each backend touched: one 8-byte PTE per
            # 4 KiB page (x86-64 paging) = RssShmem / 512; on huge pages one entry per huge page.
            huge_kb = page_kb_of(0, host) or 2048
            est = 0.0
            for p in members:
                pte, shm = p.vm_pte_kb or 0, p.rss_shmem_kb or 0
                if inst.backing == "hugetlb":
                    est += pte
                else:
                    est += max(0.0, pte - shm / 512) + shm * 8 / (huge_kb * 1024)
            inst.page_tables_huge_kb = int(est)
            inst.settings["processes"] = len(members)

    # ---- sizing
    def _size_running(self, inst: Instance, c: Cluster, host: HostFacts, mapping) -> None:
        s = c.settings
        try:
            hps = parse_memory("huge_page_size", s.get("huge_page_size", "0"))
        except ConfError as exc:
            inst.errors.append(str(exc))
            return
        page_kb = page_kb_of(hps, host)
        if page_kb is None:
            return
        sizes = set(host.page_sizes_kb) | {page_kb}
        pages: dict[int, int] = {}
        exact = False
        source = ""
        shown = s.get("shared_memory_size_in_huge_pages", "")
        if c.origins.get("shared_memory_size_in_huge_pages") == "server" and shown.isdigit() \
                and int(shown) > 0:
            pages[page_kb] = int(shown)
            exact, source = True, "SHOW shared_memory_size_in_huge_pages"
        size_b = None
        if mapping is not None and not mapping.hugetlb:
            size_b = mapping.size_kb * 1024  # the exact segment size, page-rounded by mmap
            src2 = "size of the shared mapping in the postmaster's smaps"
        elif c.origins.get("shared_memory_size") == "server" and s.get("shared_memory_size"):
            size_b = parse_memory("shared_memory_size", s["shared_memory_size"])
            src2 = "SHOW shared_memory_size (rounded up to 1 MB)"
        elif mapping is not None:
            size_b = mapping.size_kb * 1024  # hugetlb mapping: rounded up to its page size
            src2 = "size of the huge page mapping in the postmaster's smaps"
        if size_b is None:
            if c.settings:  # from the files; never from defaults alone
                self._size_from_files(inst, c, host)
            return
        held = 0
        if inst.backing == "hugetlb" and mapping is not None:
            # mmap rounded the segment up to whole huge pages: exactly what it holds.
            held = -(-mapping.size_kb // mapping.kernel_page_kb)
            if not source and mapping.kernel_page_kb == page_kb:
                pages[page_kb] = held
                exact, source = True, "huge pages mapped by the postmaster (smaps)"
        for kb_ in sorted(sizes):
            pages.setdefault(kb_, pages_from_bytes(size_b, kb_))
        if not source:
            source, exact = src2, mapping is not None and not mapping.hugetlb
        inst.demand = Demand(inst.id, size_b, page_kb, pages, exact, source,
                             selectable=(c.major or 0) >= 14, held_pages=held)

    def _size_stopped(self, inst: Instance, c: Cluster, host: HostFacts) -> None:
        hps = parse_memory("huge_page_size", c.settings["huge_page_size"])
        page_kb = page_kb_of(hps, host)
        if page_kb is None:
            return
        if (c.major or 0) >= 15 and self._live:
            counts, err = {}, None
            for kb_ in sorted(set(host.page_sizes_kb) | {page_kb}):
                n, err = self._postgres_C(c, host, kb_)
                if n is None:
                    break
                counts[kb_] = n
            if counts:
                inst.demand = Demand(inst.id, None, page_kb, counts, True,
                                     "postgres -C shared_memory_size_in_huge_pages",
                                     selectable=True)
                inst.settings["shared_memory_size_in_huge_pages"] = counts[page_kb]
                return
            inst.private["estimate_reason"] = err
        self._size_from_files(inst, c, host)

    def _size_from_files(self, inst: Instance, c: Cluster, host: HostFacts) -> None:
        s = c.settings
        for k, v in DEFAULTS.items():
            s.setdefault(k, v)
        vals = {k: (parse_memory(k, s[k]) if k in GUC_UNIT_BYTES else parse_int(k, s[k]))
                for k in ("shared_buffers", "wal_buffers", "min_dynamic_shared_memory",
                          "max_connections", "max_worker_processes", "max_wal_senders",
                          "autovacuum_max_workers", "max_locks_per_transaction",
                          "max_prepared_transactions")}
        size_b = documented_estimate(vals)
        page_kb = page_kb_of(parse_memory("huge_page_size", s["huge_page_size"]), host)
        pages = {kb_: pages_from_bytes(size_b, kb_) for kb_ in set(host.page_sizes_kb) | {page_kb}}
        why = inst.private.get("estimate_reason") or (
            f"PostgreSQL {c.major} cannot report it" if (c.major or 0) < 15 else "")
        inst.demand = Demand(inst.id, size_b, page_kb, pages, False,
                             "estimate (PostgreSQL 9.2 docs, Table 17-2)" +
                             (f": {why}" if why else ""), selectable=(c.major or 0) >= 14)

    def _postgres_C(self, c: Cluster, host: HostFacts, page_kb: int) -> tuple[int | None, str]:
        """PostgreSQL's own count for a stopped cluster, as the cluster owner."""
        binary = _postgres_binary(c.major)
        if binary is None:
            return None, "no postgres binary found (install the server package)"
        euid = os.geteuid()
        if euid not in (0, c.owner_uid):
            return None, f"run as root or as {c.owner} to ask PostgreSQL itself"
        # -D takes the directory holding postgresql.conf: /etc/postgresql/V/NAME on Debian.
        target = os.path.dirname(c.config_file) if c.config_file else c.datadir
        cmd = [binary, "-D", target, "-C", "shared_memory_size_in_huge_pages",
               "-c", f"huge_page_size={page_kb}kB"]
        kw = {}
        if euid == 0:
            import pwd
            pw = pwd.getpwuid(c.owner_uid)
            kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": "/"}
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, **kw)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{binary} -C failed: {exc}"
        out = r.stdout.strip()
        if r.returncode != 0 or not out.isdigit():
            msg = next((ln for ln in r.stderr.splitlines() if "FATAL" in ln or "ERROR" in ln),
                       r.stderr.strip()[:200])
            raise ConfError(f"postgres -C on {c.datadir} failed: {msg.split('  ', 1)[-1].strip()}")
        return int(out), ""

    # ---- findings
    def findings(self, inst: Instance, host: HostFacts, profile: Profile) -> list[Finding]:
        f: list[Finding] = []
        c: Cluster | None = inst.private.get("cluster")
        if c is None or not c.settings:
            return f
        iid = inst.id
        hp = c.settings.get("huge_pages", "try")
        try:
            hps = parse_memory("huge_page_size", c.settings.get("huge_page_size", "0"))
        except ConfError:
            hps = 0
        want_kb = page_kb_of(hps, host)
        if hps and want_kb not in host.page_sizes_kb:
            offered = ", ".join(fmt_page(k) for k in host.page_sizes_kb) or "none"
            f.append(Finding(
                "crit", "pg.huge_page_size.unsupported",
                f"huge_page_size = {c.settings['huge_page_size']} is not offered by this host",
                "PostgreSQL accepts any value here, but the kernel only maps the sizes it has "
                f"pools for. Offered: {offered}.", f"huge_page_size={c.settings['huge_page_size']}",
                "Documentation/admin-guide/mm/hugetlbpage.rst; /sys/kernel/mm/hugepages", iid))
        if c.settings.get("shared_memory_type") == "sysv" and hp == "on":
            f.append(Finding(
                "crit", "pg.shared_memory_type.sysv", "huge_pages=on with shared_memory_type=sysv",
                "PostgreSQL supports huge pages only for mmap shared memory and refuses to start.",
                "shared_memory_type=sysv", "src/backend/port/sysv_shmem.c", iid))
        note = inst.private.get("observe_note")
        if inst.running and inst.pid:
            if inst.backing == "hugetlb":
                sev = "ok" if hp == "on" else "warn"
                f.append(Finding(
                    sev, "pg.huge_pages.active" if hp == "on" else "pg.huge_pages.try",
                    f"Shared memory is on {fmt_page(inst.backing_page_kb)} huge pages"
                    + ("" if hp == "on" else ", but huge_pages = try"),
                    "Running on huge pages now." if hp == "on" else
                    "With try, a restart that finds the pool short falls back to 4 KiB pages "
                    "silently (logged only at DEBUG1). Set huge_pages = on so it fails loudly.",
                    f"smaps: {inst.private['shm_mapping'].path}, "
                    f"KernelPageSize {inst.backing_page_kb} kB", DOCS, iid))
            elif inst.backing in ("4k", "thp") and hp == "try":
                f.append(Finding(
                    "crit", "pg.huge_pages.fallback",
                    "huge_pages = try fell back to normal pages silently",
                    "PostgreSQL asked for huge pages, did not get them, and logged it only at "
                    "DEBUG1. Every backend now builds its own page tables for shared memory.",
                    f"smaps: {inst.private['shm_mapping'].path} on "
                    f"{'THP' if inst.backing == 'thp' else '4 KiB'} pages", DOCS, iid))
            elif inst.backing in ("4k", "thp") and hp == "off":
                f.append(Finding(
                    "warn", "pg.huge_pages.off", "huge_pages = off",
                    "Shared memory is on normal pages; huge pages cut page-table memory ~50x "
                    "and TLB misses (+20-27% select-only TPS measured at shared_buffers=8GB).",
                    "huge_pages=off", DOCS + "; hpadvise REFERENCE.md", iid))
            elif inst.backing is None and note:
                f.append(Finding("info", "pg.backing.unknown",
                                 "Cannot tell whether shared memory is on huge pages", note,
                                 "", DOCS, iid))
            if inst.backing == "thp":
                m = inst.private["shm_mapping"]
                f.append(Finding(
                    "info", "pg.thp.shmem", "Part of shared memory is on shmem THP",
                    "PostgreSQL's shared memory is shared anonymous memory: THP reaches it "
                    "through shmem_enabled, not enabled. It is not reserved, so it can be "
                    "split, compacted or refused at any time.",
                    f"ShmemPmdMapped {fmt_bytes(m.shmem_pmd_kb * 1024)} of "
                    f"{fmt_bytes(m.size_kb * 1024)}", "Documentation/admin-guide/mm/transhuge.rst",
                    iid))
        elif not inst.running and hp != "on":
            f.append(Finding(
                "warn", f"pg.huge_pages.{hp}", f"huge_pages = {hp}",
                "Set huge_pages = on so that a short pool is an error at start, not a silent "
                "fallback to 4 KiB pages.", f"huge_pages={hp} ({c.origins.get('huge_pages')})",
                DOCS, iid))
        if inst.backing != "hugetlb" and host.thp.enabled.value == "always" \
                and host.thp.shmem_enabled.value in ("never", "deny", None):
            f.append(Finding(
                "info", "pg.thp.enabled_not_shmem",
                "THP enabled=always does not reach PostgreSQL's shared buffers",
                "enabled governs private anonymous memory (backends' work_mem); shared memory "
                "follows shmem_enabled, which is never here.",
                f"enabled={host.thp.enabled.value}, shmem_enabled={host.thp.shmem_enabled.value}",
                "Documentation/admin-guide/mm/transhuge.rst", iid))
        if inst.page_tables_kb is not None and inst.page_tables_huge_kb is not None \
                and inst.backing != "hugetlb":
            f.append(Finding(
                "info", "pg.page_tables",
                f"Page tables: {fmt_bytes(inst.page_tables_kb * 1024)} now, "
                f"~{fmt_bytes(inst.page_tables_huge_kb * 1024)} on huge pages",
                "Each backend maps shared memory with its own page tables: ~2 MiB per GiB "
                "touched on 4 KiB pages.", f"VmPTE over {inst.settings.get('processes')} processes",
                "Documentation/filesystems/proc.rst (VmPTE); hpadvise REFERENCE.md", iid))
        shm_pending = [g for g in c.pending_restart if g in SHMEM_GUCS + ("huge_pages",)]
        if shm_pending:
            f.append(Finding(
                "warn", "pg.pending_restart", "Shared-memory settings wait for a restart",
                "The page count reflects what the server runs with now, not the changed "
                "settings. Restart it, or stop it and run check --pgdata, to size for them.",
                ", ".join(shm_pending), "pg_settings.pending_restart", iid))
        if inst.demand and not inst.demand.exact:
            f.append(Finding(
                "info", "pg.demand.estimate", "Page count is an estimate",
                inst.demand.source, "", DOCS, iid))
        return f

    def changes(self, inst: Instance, page_kb: int, host: HostFacts,
                profile: Profile) -> list[Change]:
        c: Cluster | None = inst.private.get("cluster")
        if c is None or not c.settings:
            return []
        out = []
        want = profile.engine(self.name).get("huge_pages", "on")
        if c.settings.get("huge_pages") != want:
            out.append(Change("setting", "huge_pages", c.settings.get("huge_pages"), want,
                              "fail at start instead of falling back silently" if want == "on"
                              else "profile", inst.id, restart=True))
        cur = c.settings.get("huge_page_size", "0")
        try:
            cur_kb = page_kb_of(parse_memory("huge_page_size", cur), host)
        except ConfError:
            cur_kb = None
        if cur_kb != page_kb or (cur not in ("0", "0kB") and
                                 parse_memory("huge_page_size", cur) // 1024 not in host.page_sizes_kb):
            new = "0" if page_kb == host.default_hugepage_kb else \
                ("1GB" if page_kb == 1048576 else f"{page_kb}kB")
            out.append(Change("setting", "huge_page_size", cur, new,
                              f"use {fmt_page(page_kb)} pages", inst.id, restart=True))
        return out

    # ---- apply
    def actions(self, inst: Instance, changes: list[Change]) -> list[Action]:
        """ALTER SYSTEM for each setting the plan changes on this instance."""
        c: Cluster = inst.private["cluster"]
        return [PgSetting(ch.target, str(ch.recommended), **_spec_of(c)) for ch in changes
                if ch.kind == "setting" and ch.instance == inst.id]

    def restart_action(self, inst: Instance) -> Action | None:
        c: Cluster | None = inst.private.get("cluster")
        if c is None or not inst.running or not c.owner:
            return None
        return PgRestart(**_spec_of(c))

    def action_from_spec(self, spec: dict) -> Action:
        spec = dict(spec)
        kind = spec.pop("kind")
        if kind == "pg_setting":
            return PgSetting(spec.pop("name"), spec.pop("value"), **spec)
        if kind == "pg_restart":
            return PgRestart(**spec)
        raise InputError(f"journal names an unknown postgres action {kind!r}")


# --------------------------------------------------------------------------- helpers

def _with_unit(setting: str, unit: str | None) -> str:
    """pg_settings gives '16384' with unit '8kB': turn it into bytes with a PG unit."""
    if not unit or not setting.lstrip("-").isdigit():
        return setting
    mt = re.fullmatch(r"(\d*)(B|kB|MB|GB|TB)", unit)
    if not mt:
        return setting
    n = int(setting) * (int(mt.group(1)) if mt.group(1) else 1)
    if n < 0:
        return setting
    return f"{n}{mt.group(2)}"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:300]


def _is_pg_dsn(dsn: str) -> bool:
    return not re.match(r"^(mysql|mariadb)(\+\w+)?://", dsn)


def _postgres_binary(major: int | None) -> str | None:
    import shutil
    if major:
        p = f"/usr/lib/postgresql/{major}/bin/postgres"  # Debian/Ubuntu layout
        if os.access(p, os.X_OK):
            return p
    return shutil.which("postgres")


def _debian_conf(sr: SysRoot, datadir: str) -> str | None:
    """Debian keeps postgresql.conf in /etc/postgresql/<version>/<cluster>/ with data_directory
    pointing back at the data directory (postgresql-common)."""
    real = os.path.realpath(datadir)
    for ver in sr.listdir("/etc/postgresql"):
        for name in sr.listdir(f"/etc/postgresql/{ver}"):
            conf = f"/etc/postgresql/{ver}/{name}/postgresql.conf"
            text = sr.read(conf, quiet_missing=True) or ""
            mt = re.search(r"^\s*data_directory\s*=?\s*'([^']+)'", text, re.M)
            if mt and os.path.realpath(mt.group(1)) == real:
                return conf
    return None
