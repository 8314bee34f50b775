"""Test helpers: throwaway PostgreSQL clusters, kernel knob save/restore, throwaway hugetlb
cgroups, running the CLI.

Never touches the system's own PostgreSQL service: every cluster lives in a temp directory
with its own socket directory and port, and is stopped and removed in teardown.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hpadvise.benchmarks.target import free_port, wait_gone  # noqa: F401
from hpadvise.facts.cgroups import mounts
from hpadvise.plugins.postgres.validate.bench import ScratchCluster as PgCluster  # noqa: F401
from hpadvise.plugins.postgres.validate.bench import pg_bindir  # noqa: F401
from hpadvise.facts.sysroot import SysRoot

THP = "/sys/kernel/mm/transparent_hugepage"
REPO = Path(__file__).resolve().parent.parent


class KernelKnobs:
    """Save every pool size's nr_hugepages and the THP knobs; restore them all."""

    def __init__(self):
        self.saved: dict[str, str] = {}
        for d in glob.glob("/sys/kernel/mm/hugepages/hugepages-*"):
            self.saved[f"{d}/nr_hugepages"] = Path(f"{d}/nr_hugepages").read_text().strip()
        for k in ("enabled", "defrag", "shmem_enabled"):
            text = Path(f"{THP}/{k}").read_text()
            self.saved[f"{THP}/{k}"] = text.split("[")[1].split("]")[0]
        for p in glob.glob(f"{THP}/hugepages-*kB/*enabled"):  # per-size THP knobs, as found
            self.saved[p] = Path(p).read_text().split("[")[1].split("]")[0]
        from hpadvise.facts.sysctls import PLANNED  # the sysctls a plan may change
        for d in PLANNED:
            if os.path.exists(d.path):
                self.saved[d.path] = Path(d.path).read_text().strip()

    @staticmethod
    def writable() -> bool:
        return os.geteuid() == 0 and os.access("/proc/sys/vm/nr_hugepages", os.W_OK)

    @staticmethod
    def set(path: str, value) -> None:
        with open(path, "w") as f:
            f.write(str(value))

    def pool(self, size_kb: int, pages: int) -> int:
        """Set a pool; what the kernel granted. A 1 GiB pool the kernel cannot fill in a
        fragmented memory is asked again once there is room (GiganticRoom), so that no
        test's outcome depends on what the host ran before."""
        p = f"/sys/kernel/mm/hugepages/hugepages-{size_kb}kB/nr_hugepages"
        self.set(p, pages)
        got = int(Path(p).read_text())
        if got < pages and size_kb >= 1 << 20:
            from gigantic import GiganticRoom  # which sets its knobs through this class
            GiganticRoom.make()
            self.set(p, pages)
            got = int(Path(p).read_text())
        return got

    def restore(self) -> None:
        # THP first, then pools; a pool shrink only frees pages nobody holds.
        for path, value in sorted(self.saved.items(),
                                  key=lambda kv: kv[0].startswith("/sys/kernel/mm/hugepages")):
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


def scratch_dirs() -> set[str]:
    """validate's scratch directories in /tmp (servers, journals): none may be left."""
    return {d for d in os.listdir("/tmp") if d.startswith(("hpadvise-pg-", "hpadvise-my-",
                                                             "hpadvise-validate"))}


def end_validate(p: subprocess.Popen, dirs: set[str]) -> None:
    """A validate that ran on past its test's patience: killed, and the scratch servers it
    made (postmasters outlive it: pg_ctl detaches them) stopped and removed, so that no later
    test runs beside them. The knobs fixture puts the pools and THP back."""
    import shutil
    if p.poll() is None:
        p.kill()
        p.wait()
    for d in scratch_dirs() - dirs:
        path = f"/tmp/{d}"
        pid_file = Path(f"{path}/data/postmaster.pid")
        try:
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGQUIT)  # immediate stop
            wait_gone(pid, 10)
        except (OSError, ValueError, IndexError):
            pass
        shutil.rmtree(path, ignore_errors=True)


def host_state(cluster=None, persist_root=None) -> dict:
    """Every path apply may touch: pools of every size, THP knobs, the cluster's
    postgresql.auto.conf, and the files under a persist root."""
    state = {}
    for p in sorted(glob.glob("/sys/kernel/mm/hugepages/*/nr_hugepages")):
        state[p] = Path(p).read_text()
    for k in ("enabled", "defrag", "shmem_enabled"):
        state[f"{THP}/{k}"] = Path(f"{THP}/{k}").read_text()
    for p in sorted(glob.glob(f"{THP}/hugepages-*kB/*enabled")):
        state[p] = Path(p).read_text()
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


class NoCgroup(Exception):
    """This host offers no hugetlb cgroup of the kind asked for."""


_cg_names = itertools.count()


class Cgroup:
    """A throwaway hugetlb cgroup: v2 under the host's cgroup2 mount, or v1 in a hugetlb
    hierarchy this object mounts itself."""

    def __init__(self, version: int):
        self.version, self.mounted, self.enabled = version, None, False
        if version == 2:
            self.root = mounts(SysRoot("/")).get("v2")
            if not self.root or "hugetlb" not in Path(f"{self.root}/cgroup.controllers"
                                                      ).read_text().split():
                raise NoCgroup("no cgroup v2 hierarchy with the hugetlb controller")
            ctl = Path(f"{self.root}/cgroup.subtree_control")
            if "hugetlb" not in ctl.read_text().split():
                ctl.write_text("+hugetlb")
                self.enabled = True
        else:
            self.root = tempfile.mkdtemp(prefix="hpadvise-cg1-")
            # The controller moves to v1 only once no cgroup in v2 uses it, and v2 cgroups
            # removed a moment ago (an earlier test's) are still being freed: retry a while.
            deadline = time.time() + 30
            while True:
                r = subprocess.run(["mount", "-t", "cgroup", "-o", "hugetlb", "hpadvise-test",
                                    self.root], capture_output=True, text=True)
                if r.returncode == 0 or time.time() > deadline:
                    break
                time.sleep(0.2)
            if r.returncode != 0:
                os.rmdir(self.root)
                raise NoCgroup(f"cannot mount a v1 hugetlb hierarchy: {r.stderr.strip()}")
            self.mounted = self.root
        self.name = f"hpadvise-test-{os.getpid()}-{next(_cg_names)}"
        self.path = Path(self.root) / self.name
        self.path.mkdir()

    def limit(self, fault: int | None, rsvd: int | None) -> None:
        names = ("max", "rsvd.max") if self.version == 2 else \
            ("limit_in_bytes", "rsvd.limit_in_bytes")
        for name, v in zip(names, (fault, rsvd)):
            (self.path / f"hugetlb.2MB.{name}").write_text("max" if v is None and self.version
                                                           == 2 else str(v if v is not None
                                                                         else -1))

    def run_in(self, cmd: str, **kw) -> subprocess.CompletedProcess:
        """A shell command started inside the cgroup (its children stay there)."""
        return subprocess.run(["sh", "-c", f"echo $$ > {self.path}/cgroup.procs && exec {cmd}"],
                              capture_output=True, text=True, **kw)

    def events(self) -> int:
        if self.version == 2:
            text = (self.path / "hugetlb.2MB.events").read_text()
            return int(text.split("max")[1].split()[0])
        return int((self.path / "hugetlb.2MB.failcnt").read_text())

    def remove(self) -> None:
        for _ in range(100):  # the servers' processes leave as they exit
            try:
                self.path.rmdir()
                break
            except OSError:
                for pid in (self.path / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.1)
        if self.enabled:
            Path(f"{self.root}/cgroup.subtree_control").write_text("-hugetlb")
        if self.mounted:
            self._unmount()

    def _unmount(self) -> None:
        """Unmount the v1 hierarchy and wait until the kernel gives hugetlb back to v2. The
        kernel destroys a v1 hierarchy at unmount only if it has no children left, and a
        removed cgroup lingers a moment while it is freed: then the hierarchy outlives the
        unmount, holding the controller, until it is mounted and unmounted again."""
        for _ in range(50):
            subprocess.run(["umount", self.mounted], check=False)
            deadline = time.time() + 1
            while time.time() < deadline:
                if self._v1_gone():
                    os.rmdir(self.mounted)
                    return
                time.sleep(0.05)
            subprocess.run(["mount", "-t", "cgroup", "-o", "hugetlb", "hpadvise-test",
                            self.mounted], check=False)
        os.rmdir(self.mounted)
        raise RuntimeError("the v1 hugetlb hierarchy outlived its unmount: hugetlb is not "
                           "back in cgroup v2 (mount and unmount it again by hand)")

    @staticmethod
    def _v1_gone() -> bool:
        """hugetlb's hierarchy ID in /proc/cgroups is 0 again (bound to cgroup v2)."""
        for line in Path("/proc/cgroups").read_text().splitlines():
            f = line.split()
            if f and f[0] == "hugetlb":
                return f[1] == "0"
        return True


def in_own_pid_namespace(tmp_path, script: str, args: list[str], journal,
                         timeout: int) -> subprocess.CompletedProcess:
    """`script` (Python) run in a PID namespace of its own with a /proc of that namespace, so
    that hpadvise inside sees only the servers the script starts (never the host's services),
    its journal in `journal`."""
    import shutil
    import pytest
    if not shutil.which("unshare"):
        pytest.fail("unshare (util-linux) not found: scripts/test.sh installs it")
    (tmp_path / "in_ns.py").write_text(script)
    return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                           str(tmp_path / "in_ns.py"), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "HPADVISE_JOURNAL_DIR": str(journal)})


def redis_server(tmp_path, *wrap: str, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    """A throwaway redis-server on a free port of 127.0.0.1 (`.port`; check names it
    redis:PORT), started through `wrap` (a command that execs it) and waited for until it
    answers PING, for at most 20 s."""
    import shutil
    import socket
    import pytest
    if not shutil.which("redis-server"):
        pytest.fail("redis-server not found: scripts/test.sh installs it")
    port = free_port()
    p = subprocess.Popen([*wrap, shutil.which("redis-server"), "--port", str(port), "--bind",
                          "127.0.0.1", "--save", "", "--appendonly", "no", "--dir",
                          str(tmp_path), *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p.port = port
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and p.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return p
        except OSError:
            pass
        time.sleep(0.05)
    p.kill()
    p.wait()
    pytest.fail(f"redis-server on port {port} did not answer PING in 20 s (exit {p.returncode})")


def pg_ctl_done(datadir: str, timeout: float = 120) -> None:
    """Wait until no pg_ctl runs for `datadir` (one a killed hpadvise left behind goes on with
    its stop or start without it): the cluster is then up or down for good. Fails the test
    past `timeout` seconds."""
    import pytest

    real = os.path.realpath(datadir)

    def left() -> list[int]:
        pids = []
        for d in glob.glob("/proc/[0-9]*"):
            try:
                argv = Path(f"{d}/cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if argv[0].endswith("pg_ctl") and any(
                    a.startswith("/") and os.path.realpath(a) == real for a in argv[1:]):
                pids.append(int(d[6:]))
        return pids
    deadline = time.monotonic() + timeout
    while left():
        if time.monotonic() > deadline:
            pytest.fail(f"pg_ctl for {datadir} still runs after {timeout:.0f} s: {left()}")
        time.sleep(0.05)
