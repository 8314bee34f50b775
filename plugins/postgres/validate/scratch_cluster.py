"""A throwaway PostgreSQL cluster, for validate and the tests: initdb into a scratch directory,
or a data directory another step fills (a base backup, a copy of one), with its own port and
socket, run as an unprivileged OS user (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from typing import Callable

from hpadvise.benchmarks.face import ScratchServer, check_run, free_port, run_as, wait_gone
from hpadvise.api.face import InputError

from .copying import prepare_copy


def psql(bindir: str, socket_dir: str, port: int, role: str, pw, sql: str,
         db: str = "postgres") -> str:
    """One statement through psql over a cluster's socket, run as OS user `pw` and connecting
    as `role`: its output unaligned and tuples only (psql -At); RuntimeError with psql's own
    words when it fails. Scratch clusters, a running cluster and a copy's source all query
    through it."""
    r = subprocess.run([f"{bindir}/psql", "-h", socket_dir, "-p", str(port), "-U", role, "-d", db,
                        "-Atc", sql], capture_output=True, text=True, cwd="/", **run_as(pw))
    if r.returncode != 0:
        raise RuntimeError(f"psql: {r.stderr.strip()[-300:]}")
    return r.stdout.strip()


def pg_bindir() -> str | None:
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):  # Debian layout
        if os.access(f"{d}/postgres", os.X_OK):
            return d
    p = shutil.which("pg_config")
    if p:
        return subprocess.run([p, "--bindir"], capture_output=True, text=True).stdout.strip()
    return None


class ScratchCluster(ScratchServer):
    """initdb into a temp directory owned by `user`; listens only on its own socket. With
    `fill`, the data directory is what fill(datadir) makes (a base backup, a copy of one) and
    `prepare(cluster)` configures it, instead of initdb."""

    def __init__(self, settings: dict[str, str] | None = None, user: str = "postgres",
                 base: str | None = None, bindir: str | None = None,
                 fill: Callable[[str], object] | None = None,
                 prepare: Callable[["ScratchCluster"], object] | None = None):
        self.bindir = bindir or pg_bindir()
        if self.bindir is None:
            raise InputError("PostgreSQL server binaries not found; install the server package "
                             "(Debian: apt-get install postgresql)")
        self.config_file, self.major = None, None

        def build() -> None:
            self.datadir, self.log, self.port = f"{self.tmp}/data", f"{self.tmp}/log", free_port()
            if fill is not None:
                fill(self.datadir)
                if prepare is not None:
                    prepare(self)
                return
            # initdb's own backends take no page of the host's pools (kit/nohuge.py)
            self._run([f"{self.bindir}/initdb", "-D", self.datadir, "-A", "trust", "-U",
                       "postgres", "--no-sync"], check=True, no_huge_pages=True)
            self.configure({"port": str(self.port), "unix_socket_directories": f"'{self.tmp}'",
                            "listen_addresses": "''", **(settings or {})})
        # a validate killed before its cleanup leaves the directory to rollback, which stops
        # the postmaster with SIGQUIT, the immediate shutdown (PostgreSQL's docs, "Shutting
        # Down the Server")
        self.made(user, "hpadvise-pg-", base, "PostgreSQL", "data/postmaster.pid", "QUIT", build)

    @property
    def pid_file(self) -> str:
        return f"{self.datadir}/postmaster.pid"

    @classmethod
    def copy_of(cls, other: "ScratchCluster") -> "ScratchCluster":
        """A stopped cluster's data directory copied (owner and modes kept) into a new temp
        directory, listening on its own port and socket."""
        return cls(user=other.user, base=os.path.dirname(other.tmp), bindir=other.bindir,
                   fill=lambda d: check_run(["cp", "-a", other.datadir, d]),
                   prepare=lambda c: c.configure({"port": str(c.port),
                                                  "unix_socket_directories": f"'{c.tmp}'"}))

    @property
    def run_as(self) -> dict:
        return run_as(self.pw)

    def _run(self, cmd, check=False, **kw):
        if check:
            return check_run(cmd, **self.run_as, **kw)
        kw.setdefault("cwd", "/")
        return subprocess.run(cmd, capture_output=True, text=True, **self.run_as, **kw)

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

    def psql(self, sql: str, db: str = "postgres") -> str:
        return psql(self.bindir, self.tmp, self.port, "postgres", self.pw, sql, db)

    def stop(self, mode: str = "immediate") -> None:
        """Stop the scratch server: immediate by default (its data is disposable and the next
        start replays WAL), "fast" for a clean shutdown checkpoint (pg_ctl(1): the copy of a
        cleanly stopped cluster starts without crash recovery)."""
        if self.running():
            pid = self.pid
            self._run([f"{self.bindir}/pg_ctl", "-D", self.datadir, "-m", mode, "-w",
                       "stop"])
            wait_gone(pid, 10)  # until the postmaster has really exited


def scratch_from(fill, user: str, bindir: str, settings: list[str], extra: dict[str, str],
                 tmp_base: str | None = None) -> ScratchCluster:
    """A ScratchCluster (not started) whose data directory `fill(datadir)` makes: a base
    backup taken into it, or a copy of one (copying.copy_base)."""
    def prepare(c: ScratchCluster) -> None:
        os.chown(c.datadir, c.pw.pw_uid, c.pw.pw_gid)
        prepare_copy(c.datadir, c.pw, c.port, c.tmp, settings, extra)
    return ScratchCluster(user=user, base=tmp_base, bindir=bindir, fill=fill, prepare=prepare)
