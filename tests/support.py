"""Test helpers: throwaway PostgreSQL clusters, kernel knob save/restore, running the CLI.

Never touches the system's own PostgreSQL service: every cluster lives in a temp directory
with its own socket directory and port, and is stopped and removed in teardown.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

THP = "/sys/kernel/mm/transparent_hugepage"
REPO = Path(__file__).resolve().parent.parent


from hpadvise.benchmarks.target import free_port  # noqa: E402,F401
from hpadvise.plugins.postgres.bench import ScratchCluster as PgCluster  # noqa: E402,F401
from hpadvise.plugins.postgres.bench import pg_bindir  # noqa: E402,F401


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
