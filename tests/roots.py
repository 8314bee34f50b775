"""Servers of newer releases than the host's, run as a container holds them, for the live tests:
each in a Debian root built once by scripts/roots.sh (sid: Oracle MySQL 9.7; trixie: MariaDB
11.8 and PostgreSQL 17; bullseye: PostgreSQL 13; and Ubuntu's jammy: PostgreSQL 14), with the
root's own binaries, libraries and users.

RootServer runs one in private mount and PID namespaces (unshare --mount --pid --fork
--propagation private --kill-child): a fresh /proc, the host's /dev (with a private /dev/shm)
and /sys, host temp directories bound over the root's /run and /tmp (so /run/mysqld and
/run/postgresql are the server's own), then chroot into the root and the server in the
foreground as the root's own server user (uids of the root's /etc/passwd: trixie's postgres
is uid 100, which the host calls messagebus). A shell is the namespace's PID 1, as an init in a
container: when the unshare process dies, the kernel kills it and with it every process of
the namespace, whatever user they run as. From the host the server is a process whose
/proc/PID/root is the root and whose NSpid has two numbers.

RootContainer (tests/roots_container.py) runs the same server under runc; each engine's own
commands are in tests/roots_engines.py, the namespace's processes in tests/roots_procs.py.

Each server gets a fresh data directory inside the root, /var/lib/hplab/NAME/data, initialised
inside the root (mysqld --initialize-insecure, mariadb-install-db, initdb), and its log beside
it, /var/lib/hplab/NAME/server.log; destroy() stops the server, kills whatever is left of its
namespace or container, and removes the directory and the temp directories. Servers of other
sessions in the same root are left alone (only processes of this server's own PID namespace or
container are killed)."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from hpadvise.benchmarks.target import free_port
from roots_engines import EngineCommands
from roots_procs import _status, alive, kill_all, ns_of, procs_in

CACHE = Path(os.environ.get("HPADVISE_ROOTS", "/var/tmp/hpadvise-roots"))
SUITE = {"mysql": "sid", "mariadb": "trixie", "postgres": "trixie"}
COMM = {"mysql": "mysqld", "mariadb": "mariadbd", "postgres": "postgres"}
USER = {"mysql": "mysql", "mariadb": "mysql", "postgres": "postgres"}
RUNDIR = {"mysql": "/run/mysqld", "mariadb": "/run/mysqld", "postgres": "/run/postgresql"}
LAB = "/var/lib/hplab"
MARKER = "etc/hpadvise-root"


class NoRoot(Exception):
    """The suite's root is not built: the reason (scripts/roots.sh builds it)."""


def root_path(suite: str) -> Path | None:
    """The cached root of `suite`, or None when it is not built, or built before a package
    the suite now asks for (scripts/roots.sh path decides both; why_no_root says why)."""
    if not (CACHE / suite / MARKER).is_file():
        return None
    r = subprocess.run([str(Path(__file__).resolve().parents[1] / "scripts" / "roots.sh"),
                        "path", suite], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "HPADVISE_ROOTS": str(CACHE)})
    return CACHE / suite if r.returncode == 0 else None


def why_no_root(suite: str) -> str:
    log = CACHE / f"{suite}.log"
    tail = ""
    if log.is_file():
        tail = ": its last build ended with: " + " | ".join(
            log.read_text(errors="replace").strip().splitlines()[-3:])
    return (f"no up-to-date {suite} root in {CACHE} (scripts/roots.sh build {suite} makes it; "
            f"scripts/test.sh runs it){tail}")


def root_user(root: Path, name: str) -> tuple[int, int]:
    """uid and gid of `name` in the root's own /etc/passwd (not the host's)."""
    for line in (root / "etc/passwd").read_text().splitlines():
        f = line.split(":")
        if f[0] == name:
            return int(f[2]), int(f[3])
    raise NoRoot(f"no user {name!r} in {root}/etc/passwd")


class RootServer(EngineCommands):
    """One server in a root, in private mount and PID namespaces (see the module's docstring).

    `options`: for MySQL and MariaDB, command-line options ("--innodb-buffer-pool-size=1G",
    "--large-pages=ON") or a dict {name: value} made into --name=value. For PostgreSQL, a dict
    of settings written to postgresql.conf, or a list of postgres command-line options
    (["-c", "shared_buffers=1GB"]), which postmaster.opts records. `no_sys=True` leaves the
    root's /sys empty, as in containers that do not mount it. `pg_ctl=True` starts
    PostgreSQL with `pg_ctl -o OPTIONS start`, as an entrypoint that daemonises it does; the
    postmaster is then a child of the namespace's PID 1, not of a foreground command."""

    def __init__(self, suite_root: Path | None, engine: str, options: list[str] | dict | None
                 = None, name: str | None = None, pg_ctl: bool = False, no_sys: bool = False):
        if engine not in SUITE:
            raise ValueError(f"unknown engine {engine!r}: mysql, mariadb or postgres")
        root = suite_root if suite_root is not None else root_path(SUITE[engine])
        if root is None or not (Path(root) / MARKER).is_file():
            raise NoRoot(why_no_root(Path(root).name if root is not None else SUITE[engine]))
        self.root = Path(root).resolve()
        self.engine = engine
        self.name = name or f"{engine}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.dir = f"{LAB}/{self.name}"  # the server's directory, inside the root
        self.datadir = f"{self.dir}/data"
        self.log = f"{self.dir}/server.log"
        self.port = free_port()
        self.pg_ctl = pg_ctl
        self.no_sys = no_sys  # a root without /sys, as some containers are
        self.uid, self.gid = root_user(self.root, USER[engine])
        # PostgreSQL's binaries: the one major installed in the root (17 in trixie, 13 in
        # bullseye, 14 in jammy)
        bins = sorted(self.root.glob("usr/lib/postgresql/*/bin/postgres"))
        if engine == "postgres" and not bins:
            raise NoRoot(f"no PostgreSQL under {self.root}/usr/lib/postgresql: rebuild the root "
                         "(scripts/roots.sh)")
        self.pg_bin = "/" + str(bins[-1].parent.relative_to(self.root)) if bins else ""
        self.options, self.settings = self._options(options)
        self.pid: int | None = None  # the server's host PID, once started
        self.proc: subprocess.Popen | None = None  # unshare
        self.ns: str | None = None  # its PID namespace, pid:[inode]
        self.made_dir = False  # the server's directory in the root is ours to remove
        self.tmp = tempfile.mkdtemp(prefix=f"hplab-{self.name}-")
        os.chmod(self.tmp, 0o755)
        try:
            self._prepare()
        except BaseException:
            self.destroy()
            raise

    # ---- paths
    def host(self, path: str) -> Path:
        """A path inside the root, as the host sees it."""
        return self.root / path.lstrip("/")

    @property
    def run_dir(self) -> str:
        return RUNDIR[self.engine]

    # ---- setting up
    def _prepare(self) -> None:
        # the host's side of /run and /tmp, and the server's directory in the root
        run, tmp = Path(self.tmp, "run"), Path(self.tmp, "tmp")
        run.mkdir()
        tmp.mkdir()
        os.chmod(tmp, 0o1777)
        own = run / self.run_dir.removeprefix("/run/")
        own.mkdir()
        os.chown(own, self.uid, self.gid)
        os.chmod(own, 0o2775 if self.engine == "postgres" else 0o755)
        lab = self.host(LAB)
        lab.mkdir(exist_ok=True)
        d = self.host(self.dir)
        d.mkdir()  # never another server's: a name in use fails here
        self.made_dir = True
        os.chown(d, self.uid, self.gid)
        log = self.host(self.log)
        log.touch()
        os.chown(log, self.uid, self.gid)
        os.chmod(log, 0o640)
        self._init_datadir()

    def _mounts(self) -> str:
        """Shell commands that make the root a container's: run in the new namespaces."""
        r = shlex.quote(str(self.root))
        run, tmp = shlex.quote(f"{self.tmp}/run"), shlex.quote(f"{self.tmp}/tmp")
        return "\n".join([
            "set -e",
            f"mount -t proc -o nosuid,nodev,noexec proc {r}/proc",
            f"mount --rbind /dev {r}/dev",
            f"mount -t tmpfs -o nosuid,nodev,mode=1777 shm {r}/dev/shm",
            *([] if self.no_sys else [f"mount --rbind /sys {r}/sys"]),
            f"mount --bind {run} {r}/run",
            f"mount --bind {tmp} {r}/tmp",
        ])

    def _chroot(self, argv: list[str], as_user: bool = True) -> list[str]:
        user = [f"--userspec={self.uid}:{self.gid}", f"--groups={self.gid}"] if as_user else []
        return ["chroot", *user, str(self.root), "/usr/bin/env", "-i",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "LC_ALL=C.UTF-8", "HOME=/", *argv]

    def _enter(self, argv: list[str], as_user: bool = True, init: str | None = None
               ) -> list[str]:
        """argv in the root, in new mount and PID namespaces; `init` (shell) instead of a
        plain run keeps a shell as PID 1 around it."""
        body = init if init is not None else shlex.join(self._chroot(argv, as_user))
        script = self._mounts() + "\n" + body
        return ["unshare", "--mount", "--pid", "--fork", "--propagation", "private",
                "--kill-child", "sh", "-c", script]

    # ---- the server

    def start(self, timeout: int = 120) -> None:
        """Start the server; back when it accepts connections."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"{self.name} is running already")
        self.ns = self.pid = None  # a restart: a new namespace, a new server process
        # the namespace's own output (mounts, the shell) in a file: no pipe to fill
        with open(Path(self.tmp, "ns.log"), "a") as out:
            self.proc = subprocess.Popen(self._enter([], init=self._init_script()),
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         start_new_session=True)
        self._wait_ready(timeout)

    def _init_pid(self) -> int | None:
        """Host PID of the namespace's PID 1 (unshare's child)."""
        try:
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            return None
        return int(kids.split()[0]) if kids.split() else None

    def find_pid(self) -> int | None:
        """Host PID of the server: a process of this namespace whose root is the root, named
        mysqld/mariadbd/postgres, a child of the namespace's PID 1."""
        init = self._init_pid()
        if init is None:
            return None
        self.ns = self.ns or ns_of(init)
        for pid in procs_in(self.root):  # its root is the root or inside it
            st = _status(pid)
            if st.get("Name") == COMM[self.engine] and st.get("PPid") == str(init) \
                    and ns_of(pid) == self.ns:
                return pid
        return None

    def _wait_ready(self, timeout: int) -> None:
        deadline = time.time() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.engine} in {self.root} exited (rc "
                                   f"{self.proc.returncode}) before accepting connections: "
                                   f"{self._ns_log()[-800:]} {self.log_text()[-1500:]}")
            self.pid = self.pid if self.pid and alive(self.pid) else self.find_pid()
            if self.pid and self._ping():
                return
            if time.time() > deadline:
                log = self.log_text()[-1500:]
                self.stop()
                raise RuntimeError(f"{self.engine} in {self.root} did not accept connections "
                                   f"within {timeout} s: {log}")
            time.sleep(0.3)

    # ---- inside
    def exec_argv(self, argv: list[str], user: bool = False) -> list[str]:
        """argv run inside the server's namespaces and root (nsenter), as root or, with
        `user`, as the server's user."""
        ids = ["-S", str(self.uid), "-G", str(self.gid)] if user else []
        return ["nsenter", "-t", str(self.pid), "-m", "-p", "-r", "--wd=/", *ids, "--",
                "/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
                "LC_ALL=C.UTF-8", "HOME=/", *argv]

    def exec(self, argv: list[str], user: bool = False, timeout: int = 120
             ) -> subprocess.CompletedProcess:
        if not self.pid:
            raise RuntimeError(f"{self.name} is not running")
        return subprocess.run(self.exec_argv(argv, user), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def sql(self, query: str, timeout: int = 120) -> str:
        """The query run by the root's own client inside the server's namespaces: its
        output (tab-separated rows for MySQL/MariaDB, |-separated for PostgreSQL)."""
        argv, user = self.client_argv(query)
        r = self.exec(argv, user=user, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{argv[0]} in {self.name}: rc {r.returncode}: "
                               f"{(r.stderr or r.stdout).strip()[-800:]}")
        return r.stdout

    def _ns_log(self) -> str:
        try:
            return Path(self.tmp, "ns.log").read_text(errors="replace")
        except OSError:
            return ""

    def log_text(self) -> str:
        try:
            return self.host(self.log).read_text(errors="replace")
        except OSError:
            return ""

    # ---- ending

    def stop(self, timeout: int = 60) -> None:
        """Clean shutdown (the server's own signal to its host PID), then the namespace goes."""
        pid = self.pid if self.pid and alive(self.pid) else (self.find_pid() if
                                                                self._running() else None)
        if pid:
            try:
                os.kill(pid, self._stop_signal())
            except ProcessLookupError:
                pass
            deadline = time.time() + timeout
            while alive(pid) and time.time() < deadline:
                time.sleep(0.1)
        self._end_namespace()
        self.pid = None

    def _running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _end_namespace(self) -> None:
        """The unshare process and its group killed: the namespace's PID 1 dies with it, and
        the kernel kills every process left in the namespace; any straggler of the namespace
        is killed by PID."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None
        self._kill_ns()

    def _kill_ns(self) -> None:
        if not self.ns:
            return
        kill_all(lambda: [p for p in procs_in(self.root) if ns_of(p) == self.ns and alive(p)])

    def processes(self) -> list[int]:
        """Host PIDs of this server's processes still alive (its namespace's, in the root)."""
        return [p for p in procs_in(self.root) if self.ns and ns_of(p) == self.ns and alive(p)]

    def destroy(self) -> None:
        """Stop; remove the server's directory in the root and its temp directories. No
        process of it is left; its mounts were the namespace's and went with it."""
        try:
            self.stop()
        finally:
            self._end_namespace()
            if self.made_dir:
                shutil.rmtree(self.host(self.dir), ignore_errors=True)
            shutil.rmtree(self.tmp, ignore_errors=True)


def mysql97(options: list[str] | dict | None = None, **kw) -> RootServer:
    """Oracle MySQL 9.7 in the sid root."""
    return RootServer(None, "mysql", options, **kw)


def maria118(options: list[str] | dict | None = None, **kw) -> RootServer:
    """MariaDB 11.8 in the trixie root."""
    return RootServer(None, "mariadb", options, **kw)


def pg13(settings: dict | list[str] | None = None, **kw) -> RootServer:
    """PostgreSQL 13 in the bullseye root (whose python3 is 3.9)."""
    return RootServer(root_path("bullseye") or CACHE / "bullseye", "postgres", settings, **kw)


def pg17(settings: dict | list[str] | None = None, **kw) -> RootServer:
    """PostgreSQL 17 in the trixie root: a settings dict (postgresql.conf) or command-line
    options."""
    return RootServer(None, "postgres", settings, **kw)
