"""PostgreSQL for `validate`: a throwaway cluster (initdb into a temp directory, own socket and
port, run as an unprivileged OS user: PostgreSQL refuses to run as root), or a running instance
benchmarked in a scratch database; pg_prewarm over block ranges; pgbench or TPC-C for sysbench.
Used by the tests too; never the system's own service unless named with --instance."""

from __future__ import annotations

import os
import pwd
from types import SimpleNamespace

from hpadvise.benchmarks.face import BenchTarget, mark_scratch, need_binary, own_copy, run_as
from hpadvise.api.face import InputError, Proc, SysRoot, backing_of

from ..actions import PgRestart, PgSetting, main_segment, read_pid
from .scratch_cluster import ScratchCluster, pg_bindir, psql  # noqa: F401 (validate's and the tests')


class RunningCluster:
    """A running cluster named with --instance, seen through the same few operations as a
    scratch one. validate works in a database it creates and drops (never one it did not
    create)."""

    def __init__(self, cluster, bindir: str):
        self.datadir, self.port, self.user = cluster.datadir, cluster.port, cluster.owner
        self.tmp = cluster.socket_dir or "/var/run/postgresql"
        self.config_file, self.major = cluster.config_file, cluster.major
        self.bindir = bindir
        self.pw = pwd.getpwnam(self.user)
        self.run_as = run_as(self.pw)
        self.dbname = f"hpadvise_validate_{os.getpid()}"
        self.created = False

    def psql(self, sql: str, db: str = "postgres") -> str:
        return psql(self.bindir, self.tmp, self.port, self.user, self.pw, sql, db)

    @property
    def pid(self) -> int | None:
        return read_pid(self.datadir)

    def create_db(self) -> None:
        if self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{self.dbname}'"):
            raise InputError(f"database {self.dbname} exists already and is not validate's; "
                             "refusing to use or drop it")
        self.psql(f"CREATE DATABASE {self.dbname}")
        self.created = True

    def stop(self, mode: str = "fast") -> None:
        pass  # a real instance keeps running

    def destroy(self) -> None:
        if self.created:
            self.psql(f"DROP DATABASE IF EXISTS {self.dbname} WITH (FORCE)")
            self.created = False


# A scratch cluster's WAL while validate loads it, and for the runs. Side by side the servers
# share one disk, and what they do on it is no part of the comparison but adds to its
# spread, unequally (one server's writes queue behind the other's):
# - checkpoints: one every max_wal_size of WAL (1GB by default, a minute or two of TPC-B),
#   on one server at a time, mid-run. Every epoch starts from a checkpoint on every server
#   (the restarts, the prewarm's CHECKPOINT), and none comes within it.
# - commits: with synchronous_commit = on each TPC-B transaction waits for its WAL flush, and
#   the two servers' flushes queue on the shared disk (on a 16-CPU host: 4,000-8,500 TPS a
#   server, epoch ratios from -1% to +10%). Off, commits return before the flush (a crash
#   may lose the last transactions, never consistency: PostgreSQL docs, "Asynchronous
#   Commit"); the WAL writer flushes in the background, and the runs measure the CPU and
#   memory work huge pages change.
# - full-page writes: the first change of a page after a checkpoint logs the whole 8 kB
#   page, so TPC-B over data larger than the buffers writes ~8 kB of WAL a transaction and
#   reaches max_wal_size within an epoch at tens of thousands of TPS. They protect against
#   torn pages in an OS crash (docs, "full_page_writes"); a scratch server's stop, fast or
#   immediate, leaves the OS's page cache whole, and its data is thrown away anyway.
# All of it is said in the report (BenchTarget.settings_note).
LOAD_SETTINGS = {"wal_level": "minimal", "max_wal_senders": "0"}
RUN_SETTINGS = {"wal_level": "replica", "max_wal_senders": "10", "checkpoint_timeout": "1h",
                "max_wal_size": "4GB", "synchronous_commit": "off", "full_page_writes": "off"}
WAL_BYTES = 4 << 30  # max_wal_size: the disk a scratch server's WAL may take
# A replay's copies: pgreplay sends each session's statements in the log's order and waits
# for a session that is still busy, so a statement logged before the one that released the row
# lock it waits for (the log's order only approximates the execution's) stalls the whole
# replay for good (seen here: four sessions updating the same five rows stopped at once).
# lock_timeout turns such a wait into that statement's error after a second (PostgreSQL docs,
# 20.11 lock_timeout), counted with the replay's errors; waits of the logged workload itself
# are far shorter.
REPLAY_SETTINGS = {"lock_timeout": "1s"}
COPY_NOTE = ("copies: the source's own settings, then validate's: its own port and socket, "
             "no archiving or statement logging, local connections only, and "
             "checkpoint_timeout = 1h, max_wal_size = 4GB, synchronous_commit = off and "
             "full_page_writes = off as for generated data (the copies share one disk)")


def prewarm_queries(rels: list[tuple[int, int]], sessions: int) -> list[str]:
    """Split (relation oid, blocks) into `sessions` pg_prewarm queries of about equal blocks,
    cutting relations into block ranges where needed (pg_prewarm(regclass, mode, fork,
    first_block, last_block); PostgreSQL docs, pg_prewarm)."""
    total = sum(n for _, n in rels)
    share = max(1, -(-total // sessions))
    queries: list[list[str]] = [[]]
    room = share
    for oid, n in rels:
        first = 0
        while first < n:
            take = min(room, n - first)
            queries[-1].append(f"pg_prewarm({oid}::regclass, 'buffer', 'main', {first}, "
                               f"{first + take - 1})")
            first += take
            room -= take
            if room == 0:
                queries.append([])
                room = share
    return [f"SELECT {' + '.join(q)}" for q in queries if q]


class PgTarget(BenchTarget):
    buffers_setting = "shared_buffers"
    prewarm_note = ""  # how it prewarms, when not with pg_prewarm
    wal_bytes = WAL_BYTES

    def __init__(self, opts):
        from hpadvise.benchmarks.face import followed
        from ..binaries import client_tool, for_scratch
        self.o = None  # the settled options, from setup on
        from .sources import CopySource, find_instance
        self.c: ScratchCluster | RunningCluster | None = None
        self.running = None
        self.pristine: str | None = None  # a replay's data as before its log (reset_data)
        # the user's data (--copy, a capture's base backup), or None: the benchmark's own
        self.source = CopySource(opts) if opts.copy or opts.replay else None
        if self.source is not None:
            self.data_bytes = self.source.data_bytes
            self.bindir, why = for_scratch(opts.targets.get("pg_bindir"), SimpleNamespace(
                id=self.source.label, state=SimpleNamespace(bindir=self.source.bindir,
                                                            major=self.source.major)))
            self.binary = f"{self.bindir}/postgres ({why})"
        elif opts.instance:
            self.running = find_instance(opts)
            self.bindir = need_binary(self.running.bindir, "PostgreSQL server binaries of "
                                      f"{opts.instance}", "postgresql")
            self.binary = f"{self.bindir}/postgres: {opts.instance}'s own"
        else:  # the user's major: --pg-bindir, the cluster validate follows, the layouts
            self.bindir, why = for_scratch(opts.targets.get("pg_bindir"),
                                           followed(opts, self.buffers_setting))
            self.binary = f"{self.bindir}/postgres ({why})"
        self.pgbench = None
        if opts.bench == "pgbench":
            self.pgbench, where = client_tool(self.bindir, "pgbench")
            need_binary(self.pgbench, "pgbench", "postgresql")
            if self.pgbench != f"{self.bindir}/pgbench":
                self.binary += f"; pgbench {where}"
        if self.source is not None:
            self.buffers = opts.buffers
            self.label, self.restart_starts = self.source.label, True
            self.settings_note = COPY_NOTE + ("; lock_timeout = 1s for the replay (a stalled "
                                              "replay becomes an error)" if opts.replay else "")
        elif opts.instance:
            self.wal_bytes = 0  # its own server: nothing new on disk but the scratch database
            self.buffers = self.running.settings.get("shared_buffers", "128MB")
            self.label = f"instance {opts.instance}"
            self.instance_ref = self.running.datadir
            self.restarts_instance = True
        else:
            self.buffers = opts.buffers
            self.label = "scratch cluster"
            self.restart_starts = True
            self.settings_note = ("scratch servers: checkpoint_timeout = 1h, max_wal_size = "
                                  "4GB (no checkpoint within an epoch; each starts from one), "
                                  "synchronous_commit = off and full_page_writes = off (the "
                                  "servers share one disk; commits do not wait for it, so the "
                                  "runs measure CPU and memory: where a server's commits "
                                  "wait for a disk, the same saving is a smaller share of "
                                  "each transaction), loaded with wal_level = minimal")

    def setup(self, o, progress) -> None:
        self.o = o  # settled: the buffers, clients and files as validate will run them
        self._progress = progress
        if self.source is not None:
            progress(f"making {self.source.label}")
            self.c = self.source.make(self.bindir, {
                "shared_buffers": o.buffers, "huge_pages": "try", **RUN_SETTINGS,
                **(REPLAY_SETTINGS if o.replay else {}),
                "max_connections": str(max(o.max_connections, o.clients + 10))})
            self.c.start()
            self.dbname = o.database or self.c.psql(
                "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate "
                "ORDER BY pg_database_size(oid) DESC LIMIT 1")
        elif self.running is not None:
            progress("creating a scratch database")
            self.c = RunningCluster(self.running, self.bindir)
            self.c.create_db()
            self.dbname = self.c.dbname
        else:
            progress("creating the scratch cluster")
            # Loaded with minimal WAL: COPY into a table created in the same transaction
            # writes no WAL then (wal_level, PostgreSQL docs 19.5.1), which halved the load
            # at scale 409 here (59 s -> 29 s); the runs use the default, replica.
            self.c = ScratchCluster({"shared_buffers": o.buffers,
                                     "max_connections": str(max(o.max_connections,
                                                                o.clients + 10)),
                                     "huge_pages": "try", **LOAD_SETTINGS},
                                    bindir=self.bindir)
            mark_scratch(self.c.datadir, self.c.pw)
            self.c.start()
            self.dbname = "postgres"
        self.instance_ref, self.owner, self.tmpdir = self.c.datadir, self.c.user, self.c.tmp
        self.dbs = [self.dbname]
        if self.source is not None:  # the user's data: every database of it is prewarmed
            self.dbs = self.c.psql("SELECT datname FROM pg_database WHERE datallowconn AND "
                                   "NOT datistemplate").splitlines()
            if self.dbname not in self.dbs:
                raise InputError(f"--database {self.dbname}: no such database in "
                                 f"{self.source.label} ({', '.join(self.dbs)})")
        try:
            for db in self.dbs:
                self.c.psql("CREATE EXTENSION IF NOT EXISTS pg_prewarm", db)
        except RuntimeError:  # contrib not installed with these binaries (RHEL: -contrib)
            self.prewarm_note = (f"prewarmed by index scans: pg_prewarm is not installed "
                                 f"with {self.bindir}")
        if o.replay:  # the data before the log, put back before every run (reset_data)
            from .copying import keep_pristine
            self.c.stop("fast")
            self.pristine = f"{self.c.tmp}/pristine"
            keep_pristine(self.c.datadir, self.pristine)
            self.c.start()

    def reset_data(self) -> None:
        """A stopped copy's data as it was before the log (a replay's statements write)."""
        if self.pristine:
            from .copying import reset_data
            reset_data(self.pristine, self.c.datadir)

    def _spec(self) -> dict:
        c = self.c
        return {"engine": "postgres", "instance": None, "datadir": c.datadir, "port": c.port,
                "socket_dir": c.tmp, "owner": c.user, "config_file": c.config_file,
                "major": c.major, "bindir": self.bindir}

    def server(self) -> str:
        return f"PostgreSQL {self.c.psql('SHOW server_version')}"

    def restart(self) -> None:
        # pg_ctl restart starts a stopped cluster too ("trying to start server anyway")
        PgRestart(**self._spec()).set(True)

    def hugepages_off(self):
        return [(PgSetting("huge_pages", "off", **self._spec()), {"value": "off"})]

    def page_size_steps(self, page_kb: int):
        # huge_page_size (PostgreSQL >= 14) picks the page size; with huge_pages = on a
        # missing pool fails the start instead of falling back.
        size = "1GB" if page_kb == 1048576 else f"{page_kb}kB"
        return [(PgSetting("huge_page_size", size, **self._spec()), {"value": size}),
                (PgSetting("huge_pages", "on", **self._spec()), {"value": "on"})]

    def pid(self) -> int | None:
        return self.c.pid if self.c is not None else None

    def prewarm(self) -> None:
        """pg_prewarm over block ranges, one session per CPU, then CHECKPOINT. Without
        pg_prewarm, an index scan over each table's first index: it reads the index and the
        table through shared buffers (a sequential scan of a table larger than a quarter of
        them would go through a small ring of buffers instead; src/backend/storage/buffer/
        README, "Buffer Ring Replacement Strategy")."""
        from concurrent.futures import ThreadPoolExecutor
        c, db = self.c, self.dbname
        workers = max(1, os.cpu_count() or 1)
        if self.prewarm_note:
            scans = [f"SET enable_seqscan = off; SET enable_bitmapscan = off; SELECT "
                     f"sum(hashtext(t::text)) FROM {tbl} t WHERE {col} >= (SELECT min({col}) "
                     f"FROM {tbl})" for tbl, col in (ln.split("|") for ln in c.psql(
                         "SELECT DISTINCT ON (x.indrelid) x.indrelid::regclass, a.attname "
                         "FROM pg_index x JOIN pg_class r ON r.oid = x.indrelid "
                         "JOIN pg_namespace n ON n.oid = r.relnamespace JOIN pg_attribute a "
                         "ON a.attrelid = r.oid AND a.attnum = x.indkey[0] "
                         "WHERE n.nspname = 'public'", db).splitlines() if ln)]
            with ThreadPoolExecutor(workers) as ex:
                list(ex.map(lambda q: c.psql(q, db), scans))
            c.psql("CHECKPOINT")
            return
        queries = []
        for db in self.dbs:
            rels = [ln.split("|") for ln in c.psql(
                "SELECT c.oid, pg_relation_size(c.oid) / current_setting('block_size')::int "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE "
                "n.nspname NOT IN ('pg_catalog', 'information_schema') AND c.relkind IN "
                "('r', 'i', 'm', 't')", db).splitlines() if ln]
            queries += [(q, db) for q in prewarm_queries(
                [(int(oid), int(n)) for oid, n in rels], workers)]
        with ThreadPoolExecutor(workers) as ex:
            list(ex.map(lambda qd: c.psql(*qd), queries))
        c.psql("CHECKPOINT")

    def driver(self, bench: str, scale: int, load: bool = True):
        c = self.c
        load = load and self.source is None  # a copy has its data
        script = self.o.script and own_copy(self.o.script, c.tmp, pwd.getpwnam(c.user))
        if bench == "replay":
            from .replay import driver_for
            return driver_for(self.o, c, self.source)
        if bench == "pgbench":
            from hpadvise.benchmarks.face import Pgbench
            d = Pgbench(self.pgbench, c.tmp, c.port, c.user, self.dbname, c.run_as,
                        script=script)
            if load:
                d.init(scale, lambda step: self._progress(
                    f"loading pgbench data (scale {scale}): {step}"))
                self._after_load()
            return d
        from hpadvise.benchmarks.face import Sysbench
        d = Sysbench({"driver": "pgsql", "host": c.tmp, "port": c.port, "user": c.user,
                      "db": self.dbname}, scale=scale, script=script)
        if load:
            d.prepare()
            self._after_load()
        return d

    def _after_load(self) -> None:
        """A scratch cluster leaves its load settings behind: the runs (and every copy made
        from it) use the defaults."""
        if isinstance(self.c, ScratchCluster):
            self.c.configure(RUN_SETTINGS)
            self.restart()

    def scratch_dir(self) -> str | None:
        return self.c.tmp if isinstance(self.c, ScratchCluster) else None

    def twin_blocker(self) -> str | None:
        if self.running is not None:
            return "--instance measures one running server, which cannot be doubled"
        return None

    def twin(self, own) -> "PgTarget":
        """A copy of the scratch cluster's data directory (taken after a clean shutdown, so it
        is consistent and neither copy replays WAL at start), with its own port and socket
        directory; `own` takes it before either server starts (BenchTarget.twin)."""
        self.c.stop("fast")
        c2 = ScratchCluster.copy_of(self.c)  # a copy that fails removes its own directory
        t = PgTarget.__new__(PgTarget)  # the same binaries, no second lookup
        t.__dict__.update(self.__dict__)
        t.c, t.dbname, t.label = c2, self.dbname, "scratch cluster (twin)"
        t.instance_ref, t.owner, t.tmpdir = c2.datadir, c2.user, c2.tmp
        own(t)
        self.c.start()
        c2.start()
        return t

    def backing(self) -> str | None:
        pid = self.c.pid
        m = main_segment(Proc(SysRoot("/"), pid).shared_mappings if pid else None)
        return backing_of([m], 2048).kind if m is not None else None

    def stop(self) -> None:
        """A fast stop: its checkpoint writes what the epoch dirtied, and the next start has
        nothing to replay. After an immediate stop the start replayed the epoch's WAL,
        reading every page it touched back into empty buffers, and ended with the same
        checkpoint: at 8 GB with 4 GB dirtied, stop, start and prewarm took 16-21 s
        (replay 8-10 s), 11-13 s after a fast stop (lab/epoch_restart.py)."""
        if self.c is not None:
            self.c.stop("fast")

    def destroy(self) -> None:
        if self.c is not None:
            self.c.destroy()
