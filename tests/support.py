"""Test helpers: throwaway PostgreSQL clusters, kernel knob save/restore, running the CLI.

Never touches the system's own PostgreSQL service: every cluster lives in a temp directory
with its own socket directory and port, and is stopped and removed in teardown.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

THP = "/sys/kernel/mm/transparent_hugepage"
REPO = Path(__file__).resolve().parent.parent


def pg_bindir() -> str | None:
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
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


class PgCluster:
    """initdb into a temp dir, owned by the `postgres` OS user (PostgreSQL refuses root)."""

    def __init__(self, settings: dict[str, str] | None = None, user: str = "postgres"):
        self.bindir = pg_bindir()
        self.user = user
        self.pw = pwd.getpwnam(user)
        self.tmp = tempfile.mkdtemp(prefix="hpadvise-pg-")
        os.chmod(self.tmp, 0o755)
        os.chown(self.tmp, self.pw.pw_uid, self.pw.pw_gid)
        self.datadir = f"{self.tmp}/data"
        self.port = free_port()
        self.log = f"{self.tmp}/log"
        self._run([f"{self.bindir}/initdb", "-D", self.datadir, "-A", "trust", "-U", "postgres",
                   "--no-sync"], check=True)
        base = {"port": str(self.port), "unix_socket_directories": f"'{self.tmp}'",
                "listen_addresses": "''", "fsync": "off"}
        self.configure({**base, **(settings or {})})

    def _run(self, cmd, check=False, **kw):
        kw.setdefault("cwd", "/")
        if os.geteuid() == 0:
            kw.update(user=self.pw.pw_uid, group=self.pw.pw_gid, extra_groups=[])
        r = subprocess.run(cmd, capture_output=True, text=True, **kw)
        if check and r.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed: {r.stderr.strip()}")
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
                       "-t", "60", "start"])
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

    def psql(self, sql: str) -> str:
        r = self._run([f"{self.bindir}/psql", "-h", self.tmp, "-p", str(self.port), "-U",
                       "postgres", "-d", "postgres", "-Atc", sql], check=True)
        return r.stdout.strip()

    def stop(self) -> None:
        if self.running():
            self._run([f"{self.bindir}/pg_ctl", "-D", self.datadir, "-m", "immediate", "-w",
                       "stop"])
            for _ in range(100):
                if not self.running():
                    break
                time.sleep(0.05)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


class KernelKnobs:
    """Save every pool size's nr_hugepages and the THP knobs; restore them all."""

    def __init__(self):
        self.saved: dict[str, str] = {}
        for d in glob.glob("/sys/kernel/mm/hugepages/hugepages-*"):
            self.saved[f"{d}/nr_hugepages"] = Path(f"{d}/nr_hugepages").read_text().strip()
        for k in ("enabled", "defrag", "shmem_enabled"):
            text = Path(f"{THP}/{k}").read_text()
            self.saved[f"{THP}/{k}"] = text.split("[")[1].split("]")[0]

    @staticmethod
    def writable() -> bool:
        return os.geteuid() == 0 and os.access("/proc/sys/vm/nr_hugepages", os.W_OK)

    @staticmethod
    def set(path: str, value) -> None:
        with open(path, "w") as f:
            f.write(str(value))

    def pool(self, size_kb: int, pages: int) -> int:
        p = f"/sys/kernel/mm/hugepages/hugepages-{size_kb}kB/nr_hugepages"
        self.set(p, pages)
        return int(Path(p).read_text())

    def restore(self) -> None:
        # THP first, then pools; a pool shrink only frees pages nobody holds.
        for path, value in sorted(self.saved.items(), key=lambda kv: "hugepages" in kv[0]):
            try:
                self.set(path, value)
            except OSError:
                pass


def run_cli(*args: str, user: str | None = None, env: dict | None = None,
            timeout: int = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "hpadvise.cli", *args]
    kw = {}
    if user:
        pw = pwd.getpwnam(user)
        kw = dict(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], cwd="/")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, **kw)


def check_json(*args: str, **kw) -> tuple[dict, subprocess.CompletedProcess]:
    r = run_cli("check", "--json", *args, **kw)
    try:
        return json.loads(r.stdout), r
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON (rc {r.returncode}): {r.stdout[:300]} {r.stderr[:500]}")


def instance(report: dict, datadir: str) -> dict:
    for i in report["instances"]:
        if os.path.realpath(i["settings"].get("data_directory", "")) == os.path.realpath(datadir):
            return i
    raise AssertionError(f"no instance for {datadir} in {[i['id'] for i in report['instances']]}")


def host_state(cluster=None, persist_root=None) -> dict:
    """Every path apply may touch: pools of every size, THP knobs, the cluster's
    postgresql.auto.conf, and the files under a persist root."""
    state = {}
    for p in sorted(glob.glob("/sys/kernel/mm/hugepages/*/nr_hugepages")):
        state[p] = Path(p).read_text()
    for k in ("enabled", "defrag", "shmem_enabled"):
        state[f"{THP}/{k}"] = Path(f"{THP}/{k}").read_text()
    if cluster:
        p = f"{cluster.datadir}/postgresql.auto.conf"
        state[p] = Path(p).read_bytes()
    if persist_root:
        for p in sorted(Path(persist_root).rglob("*")):
            if p.is_symlink():
                state[str(p)] = "->" + os.readlink(p)
            elif p.is_file():
                state[str(p)] = p.read_bytes()
    return state
