"""MariaDB for `validate`: a throwaway server (mariadb-install-db into a temp directory, its own
option file, socket and port, run as the `mysql` user; never the system's own service), its
copy for the side-by-side designs, every index read for the prewarm, and TPC-C for sysbench.
Used by the tests too."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from hpadvise.benchmarks.face import BenchTarget, ScratchServer, free_port, mark_scratch, wait_gone
from hpadvise.api.face import InputError, Proc, SysRoot, backing_of

from ..actions import MyOption, MyRestart, server_greets


def maria_bindir() -> str | None:
    """Where mariadbd / mariadb-install-db live (Debian: /usr/sbin and /usr/bin)."""
    for server in ("mariadbd", "mysqld"):
        p = shutil.which(server) or (f"/usr/sbin/{server}" if os.access(f"/usr/sbin/{server}",
                                                                        os.X_OK) else None)
        if p:
            return p
    return None


class ScratchMaria(ScratchServer):
    """A throwaway MariaDB server. root@localhost has no password and is reachable only over
    its socket."""

    def __init__(self, settings: dict[str, str] | None = None, user: str = "mysql",
                 base: str | None = None, server: str | None = None,
                 copy_of: ScratchMaria | None = None):
        """`copy_of`: a stopped scratch server whose data directory (owner and modes kept) and
        settings this one takes, on a port, socket and directory of its own."""
        self.server = server or (copy_of.server if copy_of else maria_bindir())
        install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        if self.server is None or (install is None and copy_of is None):
            raise InputError("MariaDB server binaries not found; install the server package "
                             "(Debian: apt-get install mariadb-server)")
        self.proc: subprocess.Popen | None = None

        def build() -> None:
            self.datadir = f"{self.tmp}/data"
            self.socket = f"{self.tmp}/mysqld.sock"
            self.port = free_port()
            self.log = f"{self.tmp}/error.log"
            self.cnf = f"{self.tmp}/my.cnf"
            own = {"datadir": self.datadir, "socket": self.socket, "port": str(self.port),
                   "pid-file": self.pid_file, "log-error": self.log}
            if copy_of is not None:  # its data after a clean shutdown: nothing to recover
                r = subprocess.run(["cp", "-a", copy_of.datadir, self.datadir],
                                   capture_output=True, text=True, cwd="/")
                if r.returncode != 0:
                    raise RuntimeError(f"copying {copy_of.datadir} failed: {r.stderr[-400:]}")
                self.settings = {**copy_of.settings, **own}
                self.write_cnf()
                return
            self.settings = {**own, "bind-address": "127.0.0.1",
                             "innodb-buffer-pool-size": "128M", "innodb-log-file-size": "64M",
                             "max-connections": "200", **(settings or {})}
            self.write_cnf()
            r = subprocess.run([install, f"--defaults-file={self.cnf}", f"--user={user}",
                                "--auth-root-authentication-method=normal", "--skip-test-db"],
                               capture_output=True, text=True, cwd="/")
            if r.returncode != 0:
                raise RuntimeError(f"mariadb-install-db failed: {r.stderr.strip()[-400:]}")
        # a clean shutdown on SIGTERM (mysqld's signal handling), with nothing to flush
        self.made(copy_of.user if copy_of else user, "hpadvise-my-",
                  base or (os.path.dirname(copy_of.tmp) if copy_of else None), "MariaDB",
                  "mysqld.pid", "TERM", build)

    @property
    def pid_file(self) -> str:
        return f"{self.tmp}/mysqld.pid"

    def write_cnf(self) -> None:
        with open(self.cnf, "w") as f:
            f.write("[mysqld]\n" + "".join(f"{k} = {v}\n" for k, v in self.settings.items()))
        os.chmod(self.cnf, 0o644)

    def configure(self, settings: dict[str, str]) -> None:
        self.settings.update(settings)
        self.write_cnf()

    @property
    def argv(self) -> list[str]:
        return [self.server, f"--defaults-file={self.cnf}", f"--user={self.user}"]

    def start(self, check: bool = True, timeout: float = 120) -> bool:
        self.proc = subprocess.Popen(self.argv, cwd="/", start_new_session=True,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.ready():
                return True
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        if check:
            raise RuntimeError(f"mariadbd did not start: {self.logtail()}")
        return False

    def ready(self) -> bool:
        return server_greets(self.socket)

    def sql(self, query: str, db: str | None = None) -> list[tuple]:
        from ..client import Connection
        with Connection(10, unix_socket=self.socket, user="root", database=db) as conn:
            return conn.execute(query)

    def stop(self) -> None:
        pid = self.pid
        if pid:
            try:
                os.kill(pid, 15)  # a clean shutdown; the tests do not wait for slow flushing
            except ProcessLookupError:
                pass
            wait_gone(pid, 120)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


def max_connections(clients: int) -> int:
    """The scratch server's max_connections for `clients` benchmark clients. The server
    counts a connection until its own thread has finished with it, after the client has
    gone, so a script that connects per event runs ahead of its clients: 16 clients
    reconnecting per event held up to 24 connections on a quiet server here, 41 for 32
    clients, and clients + 20 was exceeded under the full suite's load ("error 1040: Too many
    connections", which sysbench reports as "connection creation failed"). Four per client,
    and never below MariaDB's own default of 151 (the max_connections entry of MariaDB's
    server system variables)."""
    return max(151, 4 * clients)


# What the scratch servers do on disk is no part of the comparison: side by side they share
# one disk, and each commit's log flush queues behind the other server's (as PostgreSQL's
# WAL flushes did: plugins/postgres/validate/bench.py). innodb_flush_log_at_trx_commit = 2
# writes the log at every commit and flushes it once a second (MariaDB docs,
# innodb_flush_log_at_trx_commit: an OS crash may lose the last second, a server crash
# nothing); innodb_doublewrite = OFF writes each page once, without the torn-page copy
# (MariaDB docs, "InnoDB Doublewrite Buffer"), as full_page_writes = off does there. The data
# is thrown away with the server. innodb_log_file_size = 1G: InnoDB must write a page out
# before the redo log that covers its change is overwritten (MariaDB docs,
# innodb_log_file_size; "InnoDB Redo Log"), so with the 64M default TPC-C over 2 GB of buffers
# flushed pages all through every run, on the disk both servers share: epoch ratios 0.87-1.37
# and a half-width of 7.7% in 10 minutes, against 0.99-1.04 and 1.1% in 5 minutes with 1G
# (lab/README.md, "TPC-C on MariaDB side by side"), as max_wal_size = 4GB keeps PostgreSQL's
# checkpoints out of an epoch.
RUN_SETTINGS = {"innodb-flush-log-at-trx-commit": "2", "innodb-doublewrite": "OFF",
                "innodb-log-file-size": "1G"}


class MariaTarget(BenchTarget):
    """A scratch MariaDB server; validate does not take a running MySQL/MariaDB instance."""
    buffers_setting = "innodb_buffer_pool_size"
    label = "scratch MariaDB server"
    dbname = "hpadvise_validate"
    settings_note = ("scratch servers: innodb_flush_log_at_trx_commit = 2 and "
                     "innodb_doublewrite = OFF (the servers share one disk; commits do not "
                     "wait for it, so the runs measure CPU and memory: where a server's "
                     "commits wait for a disk, the same saving is a smaller share of each "
                     "transaction), innodb_log_file_size = 1G (no page flushing forced "
                     "within a run)")
    wal_bytes = 1 << 30  # innodb_log_file_size: the disk each server's redo log takes

    def __init__(self, opts):
        if opts.instance:
            raise InputError("validate --db mysql runs on a scratch MariaDB server it creates; "
                             "--instance works with --db postgres only for now")
        from hpadvise.benchmarks.face import followed
        inst = followed(opts, self.buffers_setting)  # the server the user runs: its binary
        exe = os.readlink(f"/proc/{inst.pid}/exe").removesuffix(" (deleted)") \
            if inst is not None and inst.pid and os.path.exists(f"/proc/{inst.pid}") else None
        self.server_exe = exe if exe and os.access(exe, os.X_OK) else maria_bindir()
        if self.server_exe is None:
            raise InputError("MariaDB server binaries not found (no running server to take "
                             "them from, no mariadbd or mysqld on PATH or in /usr/sbin); "
                             "install the server package (Debian: apt-get install "
                             "mariadb-server)")
        self.binary = self.server_exe + (f" (the binary of {inst.id}, the server validate "
                                         "follows)" if exe else " (PATH)")
        if opts.copy or opts.replay:
            # a copy would come from mariabackup (Debian: mariadb-backup) or a stopped
            # server's files; no tool in Debian replays a general log (Debian 12's archive
            # has pgreplay only)
            raise InputError("--copy and --replay run on PostgreSQL only: MariaDB/MySQL "
                             "copies are not made yet, and Debian has no tool that replays "
                             "a general log; use --script FILE (a sysbench Lua script)")
        self.o = None  # the settled options, from setup on
        self.buffers = opts.buffers
        self.m: ScratchMaria | None = None

    def setup(self, o, progress) -> None:
        self.o = o  # settled: the buffers, clients and script as validate will run them
        progress("creating the scratch MariaDB server")
        self.m = ScratchMaria({"innodb-buffer-pool-size": self.o.buffers,
                               "max-connections": str(max_connections(self.o.clients)),
                               "innodb-buffer-pool-dump-at-shutdown": "OFF",
                               "innodb-buffer-pool-load-at-startup": "OFF", **RUN_SETTINGS},
                              server=self.server_exe)
        mark_scratch(self.m.datadir, self.m.pw)
        self.m.start()
        self.m.sql(f"CREATE DATABASE {self.dbname}")
        self.instance_ref, self.owner, self.tmpdir = self.m.datadir, self.m.user, self.m.tmp

    def _spec(self) -> dict:
        m = self.m
        return {"engine": "mysql", "instance": None, "datadir": m.datadir, "socket": m.socket,
                "pid": m.pid, "argv": m.argv, "cwd": "/", "owner": m.user, "log_error": m.log,
                "supervisor": None}

    def server(self) -> str:
        return f"MariaDB {self.m.sql('SELECT VERSION()')[0][0]}"

    def restart(self) -> None:
        MyRestart(**self._spec()).set(True)

    def pid(self) -> int | None:
        return self.m.pid if self.m is not None else None

    def hugepages_off(self):
        return [(MyOption(self.m.cnf, "large_pages", "OFF", False, **self._spec()),
                 {"value": "OFF"})]

    def prewarm(self) -> None:
        """A full scan of every index (FORCE INDEX; PRIMARY is the clustered index holding the
        rows), one session per CPU."""
        from concurrent.futures import ThreadPoolExecutor
        m, db = self.m, self.dbname
        scans = [f"SELECT COUNT(*) FROM `{t}` FORCE INDEX (`{idx}`)" for t, idx in m.sql(
            "SELECT DISTINCT TABLE_NAME, INDEX_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = DATABASE()", db)]
        with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as ex:
            list(ex.map(lambda q: m.sql(q, db), scans))

    def driver(self, bench: str, scale: int, load: bool = True):
        from hpadvise.benchmarks.face import Sysbench
        # sysbench runs as root here: it reads a --script where the user keeps it
        d = Sysbench({"driver": "mysql", "socket": self.m.socket, "user": "root",
                      "db": self.dbname}, scale=scale, script=self.o.script)
        if load:
            d.prepare()
        return d

    def twin_blocker(self) -> str | None:
        return None

    def twin(self, own) -> "MariaTarget":
        """A copy of the scratch server's data directory, taken after a clean shutdown (so
        InnoDB starts it without crash recovery), with the same settings on its own port,
        socket and directory; `own` takes it before either server starts (BenchTarget.twin);
        both running."""
        self.m.stop()
        m2 = ScratchMaria(copy_of=self.m)  # a copy that fails removes its own directory
        t = MariaTarget.__new__(MariaTarget)  # the same binary and options
        t.__dict__.update(self.__dict__)
        t.m, t.label = m2, "scratch MariaDB server (twin)"
        t.instance_ref, t.owner, t.tmpdir = m2.datadir, m2.user, m2.tmp
        own(t)
        mark_scratch(m2.datadir, m2.pw)
        self.m.start()
        m2.start()
        return t

    def backing(self) -> str | None:
        pid = self.m.pid
        maps = Proc(SysRoot("/"), pid).smaps if pid else None
        return backing_of(maps, 2048).kind if maps is not None else None

    def scratch_dir(self) -> str | None:
        return self.m.tmp if self.m is not None else None

    def stop(self) -> None:
        if self.m is not None:
            self.m.stop()

    def destroy(self) -> None:
        if self.m is not None:
            self.m.destroy()
