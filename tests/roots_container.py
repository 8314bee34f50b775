"""A server of a root (tests/roots.py) under runc, as a container runtime holds it: the root is
the OCI bundle's read-only rootfs, with the server's directory (/var/lib/hplab/NAME), /run and
/tmp bound writable, in a cgroup of the host's v2 hierarchy (runc driven as tests/pods.py
drives it)."""

from __future__ import annotations

import json
import resource
import shlex
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from pods import base_mounts, oci_config, release, remove_cgroup, runc_argv, runtime
from roots import COMM, RootServer
from roots_procs import _status, alive, kill_all, ns_of


class RootContainer(RootServer):
    """The same server under runc: the root is the bundle's read-only rootfs; the server's
    directory, /run and /tmp are writable binds; its own PID, mount, IPC and UTS namespaces
    and a cgroup /hplab-ID in the host's v2 hierarchy. `hugepage_limit` (bytes) is the
    container's hugetlb.2MB.max, as the kubelet asks a runtime for it. The data directory is
    initialised as RootServer does (in a namespace), then the container runs the server."""

    def __init__(self, suite_root: Path | None, engine: str,
                 options: list[str] | dict | None = None, name: str | None = None,
                 pg_ctl: bool = False, hugepage_limit: int | None = None):
        self.runc, self.v2 = runtime()
        self.id = f"hplab-{uuid.uuid4().hex}"
        self.state = tempfile.mkdtemp(prefix="hplab-runc-state-")
        self.bundle = Path(tempfile.mkdtemp(prefix="hplab-runc-bundle-"))
        self.hugepage_limit = hugepage_limit
        self.enabled: list[Path] = []  # subtree_control without hugetlb before the start
        self.started = False
        try:
            super().__init__(suite_root, engine, options, name, pg_ctl)
        except BaseException:
            self._remove_runtime()
            raise

    @property
    def cgroup(self) -> Path:
        return Path(self.v2) / self.id

    def _runc(self, *args: str, timeout: int = 120, out=None) -> subprocess.CompletedProcess:
        io = {"stdout": out, "stderr": out} if out else {"capture_output": True}
        return subprocess.run(runc_argv(self.runc, self.v2, self.state, *args), text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, **io)

    def _bundle(self) -> None:
        binds = [(self.host(self.dir), self.dir), (Path(self.tmp, "run"), "/run"),
                 (Path(self.tmp, "tmp"), "/tmp")]
        mounts_ = base_mounts(devpts=True) + [{"destination": dst, "type": "bind", "source": str(src),
              "options": ["rbind", "rw"]} for src, dst in binds]
        if self.engine == "postgres" and self.pg_ctl:
            start = shlex.join([f"{self.pg_bin}/pg_ctl", "-D", self.datadir, "-l", self.log, "-o",
                                shlex.join(self.options), "-W", "start"])
            cmd = f"{start} >> {shlex.quote(self.log)} 2>&1 && exec sleep infinity"
        else:
            cmd = f"exec {shlex.join(self.server_argv())} >> {shlex.quote(self.log)} 2>&1"
        # no more open files than runc itself may have (raising it is refused)
        nofile = min(65536, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        config = oci_config(["/bin/sh", "-c", cmd], (self.uid, self.gid),
                            ["HOME=/", "LC_ALL=C.UTF-8"], str(self.root), self.engine, mounts_,
                            f"/{self.id}", self.hugepage_limit, nofile)
        (self.bundle / "config.json").write_text(json.dumps(config, indent=1))

    def start(self, timeout: int = 120) -> None:
        if self.started:
            raise RuntimeError(f"{self.name} is running already")
        # runc enables every controller of the hierarchy in the root's subtree_control for
        # the container's cgroup (fs2.CreateCgroupPath): put back what it was, afterwards
        ctl = Path(self.v2, "cgroup.subtree_control")
        if "hugetlb" not in ctl.read_text().split():
            if self.hugepage_limit is not None:
                ctl.write_text("+hugetlb")
            self.enabled.append(ctl)
        self._bundle()
        log = self.bundle / "run.log"
        with open(log, "w") as out:  # detached: the container keeps its stdio
            r = self._runc("run", "-d", "--bundle", str(self.bundle), self.id, out=out)
        self.started = True
        if r.returncode != 0:
            raise RuntimeError(f"runc run failed: {log.read_text().strip()[-600:]}")
        deadline = time.time() + timeout
        while True:
            st = self.container_state()
            if st.get("status") != "running":
                raise RuntimeError(f"{self.engine} container {st.get('status')} before "
                                   f"accepting connections: {self.log_text()[-1500:]}")
            self.pid = self.pid if self.pid and alive(self.pid) else self.find_pid()
            if self.pid and self._ping():
                return
            if time.time() > deadline:
                raise RuntimeError(f"{self.engine} container did not accept connections "
                                   f"within {timeout} s: {self.log_text()[-1500:]}")
            time.sleep(0.3)

    def container_state(self) -> dict:
        r = self._runc("state", self.id, timeout=30)
        return json.loads(r.stdout) if r.returncode == 0 else {}

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.cgroup / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def find_pid(self) -> int | None:
        """The server's host PID: the container's init once the shell exec'd it; with pg_ctl,
        the postmaster (the postgres child of the container's init)."""
        init = self.container_state().get("pid")
        if not init:
            return None
        self.ns = self.ns or ns_of(init)
        for pid in [init, *self.pids()]:
            st = _status(pid)
            if st.get("Name") == COMM[self.engine] and (pid == init or st.get("PPid") ==
                                                       str(init)):
                return pid
        return None

    def exec_argv(self, argv: list[str], user: bool = False) -> list[str]:
        who = f"{self.uid}:{self.gid}" if user else "0:0"
        return runc_argv(self.runc, self.v2, self.state, "exec", "--user", who, self.id, *argv)

    def _running(self) -> bool:
        return self.started

    def processes(self) -> list[int]:
        return [p for p in self.pids() if alive(p)]

    def _end_namespace(self) -> None:
        """runc delete -f, then whatever its cgroup still holds killed (its processes' roots
        read "/" from the host: the container pivoted into the root)."""
        if self.started:
            self._runc("delete", "-f", self.id)
            self.started = False
        kill_all(self.processes)

    def _remove_runtime(self) -> None:
        remove_cgroup(self.cgroup)
        enabled, self.enabled = self.enabled, []
        release(enabled, self.state, self.bundle)

    def destroy(self) -> None:
        try:
            super().destroy()
        finally:
            self._remove_runtime()
