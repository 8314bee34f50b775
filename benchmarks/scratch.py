"""A throwaway PostgreSQL cluster: initdb into a temp directory, own socket and port, owned by
an unprivileged OS user (PostgreSQL refuses to run as root). Used by `validate` and the tests;
never the system's own service."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from hpadvise.errors import InputError


def pg_bindir() -> str | None:
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):  # Debian layout
        if os.access(f"{d}/postgres", os.X_OK):
            return d
    p = shutil.which("pg_config")
    if p:
        return subprocess.run([p, "--bindir"], capture_output=True, text=True).stdout.strip()
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def owned_tmpdir(user: str, prefix: str, base: str | None, what: str):
    """A temp directory (0755) owned by `user`, for a scratch server run as that user."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise InputError(f"no OS user {user!r} to run {what} as") from None
    tmp = tempfile.mkdtemp(prefix=prefix, dir=base)
    os.chmod(tmp, 0o755)
    os.chown(tmp, pw.pw_uid, pw.pw_gid)
    return pw, tmp


class ScratchCluster:
    def __init__(self, settings: dict[str, str] | None = None, user: str = "postgres",
                 base: str | None = None):
        self.bindir = pg_bindir()
        if self.bindir is None:
            raise InputError("PostgreSQL server binaries not found; install the server package "
                             "(Debian: apt-get install postgresql)")
        self.pw, self.tmp = owned_tmpdir(user, "hpadvise-pg-", base, "PostgreSQL")
        self.user = user
        self.datadir = f"{self.tmp}/data"
        self.port = free_port()
        self.log = f"{self.tmp}/log"
        try:
            self._run([f"{self.bindir}/initdb", "-D", self.datadir, "-A", "trust", "-U",
                       "postgres", "--no-sync"], check=True)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        base_settings = {"port": str(self.port), "unix_socket_directories": f"'{self.tmp}'",
                         "listen_addresses": "''"}
        self.configure({**base_settings, **(settings or {})})

    @property
    def run_as(self) -> dict:
        if os.geteuid() == 0:
            return {"user": self.pw.pw_uid, "group": self.pw.pw_gid, "extra_groups": []}
        return {}

    def _run(self, cmd, check=False, **kw):
        kw.setdefault("cwd", "/")
        r = subprocess.run(cmd, capture_output=True, text=True, **self.run_as, **kw)
        if check and r.returncode != 0:
            raise RuntimeError(f"{os.path.basename(cmd[0])} failed: {r.stderr.strip()[-400:]}")
        return r

    def configure(self, settings: dict[str, str]) -> None:
        """Append settings to postgresql.conf (later lines win)."""
        with open(f"{self.datadir}/postgresql.conf", "a") as f:
            for k, v in settings.items():
                f.write(f"{k} = {v}\n")

    def postgres_C(self, param: str, *extra: str) -> str:
        r = self._run([f"{self.bindir}/postgres", "-D", self.datadir, "-C", param, *extra])
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip())
        return r.stdout.strip()

    def start(self, check=True) -> subprocess.CompletedProcess:
        r = self._run([f"{self.bindir}/pg_ctl", "-D", self.datadir, "-l", self.log, "-w",
                       "-t", "120", "start"])
        if check and r.returncode != 0:
            raise RuntimeError(f"start failed: {r.stderr.strip()} {self.logtail()}")
        return r

    def logtail(self) -> str:
        try:
            return Path(self.log).read_text()[-800:]
        except OSError:
            return ""

    @property
    def pid(self) -> int | None:
        try:
            return int(Path(f"{self.datadir}/postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def running(self) -> bool:
        pid = self.pid
        return bool(pid) and os.path.exists(f"/proc/{pid}")

    def psql(self, sql: str, db: str = "postgres") -> str:
        r = self._run([f"{self.bindir}/psql", "-h", self.tmp, "-p", str(self.port), "-U",
                       "postgres", "-d", db, "-Atc", sql], check=True)
        return r.stdout.strip()

    def stop(self) -> None:
        if self.running():
            pid = self.pid
            self._run([f"{self.bindir}/pg_ctl", "-D", self.datadir, "-m", "immediate", "-w",
                       "stop"])
            for _ in range(200):  # until the postmaster is really gone
                if not pid or not os.path.exists(f"/proc/{pid}"):
                    break
                time.sleep(0.05)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def maria_bindir() -> str | None:
    """Where mariadbd / mariadb-install-db live (Debian: /usr/sbin and /usr/bin)."""
    for server in ("mariadbd", "mysqld"):
        p = shutil.which(server) or (f"/usr/sbin/{server}" if os.access(f"/usr/sbin/{server}",
                                                                        os.X_OK) else None)
        if p:
            return p
    return None


def _gone(pid: int) -> bool:
    """True once `pid` has exited; reaps it when it is our child (a restarted server can be)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    except ChildProcessError:
        pass
    from hpadvise.procs import proc_state
    return proc_state(pid) in ("Z", "X", "?")


class ScratchMaria:
    """A throwaway MariaDB server: mariadb-install-db into a temp directory, its own option
    file (--defaults-file), socket and port, run as the `mysql` user. Never the system's own
    service. root@localhost has no password and is reachable only over its socket."""

    def __init__(self, settings: dict[str, str] | None = None, user: str = "mysql",
                 base: str | None = None):
        self.server = maria_bindir()
        install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        if self.server is None or install is None:
            raise InputError("MariaDB server binaries not found; install the server package "
                             "(Debian: apt-get install mariadb-server)")
        self.pw, self.tmp = owned_tmpdir(user, "hpadvise-my-", base, "MariaDB")
        self.user = user
        self.datadir = f"{self.tmp}/data"
        self.socket = f"{self.tmp}/mysqld.sock"
        self.port = free_port()
        self.log = f"{self.tmp}/error.log"
        self.cnf = f"{self.tmp}/my.cnf"
        self.proc: subprocess.Popen | None = None
        self.settings = {"datadir": self.datadir, "socket": self.socket, "port": str(self.port),
                         "bind-address": "127.0.0.1", "pid-file": f"{self.tmp}/mysqld.pid",
                         "log-error": self.log, "innodb-buffer-pool-size": "128M",
                         "innodb-log-file-size": "64M", "max-connections": "200",
                         **(settings or {})}
        self.write_cnf()
        try:
            r = subprocess.run([install, f"--defaults-file={self.cnf}", f"--user={user}",
                                "--auth-root-authentication-method=normal", "--skip-test-db"],
                               capture_output=True, text=True, cwd="/")
            if r.returncode != 0:
                raise RuntimeError(f"mariadb-install-db failed: {r.stderr.strip()[-400:]}")
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise

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
        from hpadvise.plugins.mysql import server_greets
        return server_greets(self.socket)

    def logtail(self) -> str:
        try:
            return Path(self.log).read_text(errors="replace")[-800:]
        except OSError:
            return ""

    @property
    def pid(self) -> int | None:
        try:
            pid = int(Path(f"{self.tmp}/mysqld.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if os.path.exists(f"/proc/{pid}") else None

    def running(self) -> bool:
        return self.pid is not None

    def sql(self, query: str, db: str | None = None) -> list[tuple]:
        import mysql.connector
        conn = mysql.connector.connect(unix_socket=self.socket, user="root", database=db,
                                       autocommit=True, connection_timeout=10)
        try:
            cur = conn.cursor()
            cur.execute(query)
            return cur.fetchall() if cur.with_rows else []
        finally:
            conn.close()

    def stop(self) -> None:
        pid = self.pid
        if pid:
            try:
                os.kill(pid, 15)  # a clean shutdown; the tests do not wait for slow flushing
            except ProcessLookupError:
                pass
            for _ in range(2400):
                if _gone(pid):
                    break
                time.sleep(0.05)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
