"""Containers as a Kubernetes node's runtime makes them, for the live tests: Debian's runc runs
an OCI bundle in a pod-shaped cgroup, kubepods/burstable/pod<uid>/<container id>, with cgroup,
PID, mount, IPC and UTS namespaces of its own, the hugetlb limit of the pod on the pod's cgroup
(as the kubelet sets it) and the container's own limit applied by runc from the bundle's
`linux.resources.hugepageLimits` (as the kubelet asks the runtime for it: 0 for a size the
container did not request).

This host mounts cgroup v2 beside v1 controllers (hybrid: the hugetlb controller is on the v2
hierarchy at /sys/fs/cgroup/unified). runc 1.1 applies hugetlb limits through v2 only where
/sys/fs/cgroup itself is a cgroup2 mount, as on every current Kubernetes node: each runc command
runs in a private mount namespace where the v2 hierarchy is bound over /sys/fs/cgroup, so runc
sees a unified host, and its cgroups land in the host's real v2 hierarchy.

The container's root is an empty read-only directory with the host's /usr, /etc, /root (the
test interpreter) and the repository bound read-only, and the directories a test names bound
read-write at the same paths. Removal deletes the container (runc delete -f), its cgroups and
the pod's, and puts every subtree_control it enabled back, whatever happened; the PostgreSQL
clusters it ran are left without a postmaster.pid (its PIDs were the container's)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from hpadvise.facts.cgroups import mounts
from hpadvise.facts.sysroot import SysRoot

REPO = Path(__file__).resolve().parent.parent
# What the container needs of the host to run the servers and the test interpreter.
READ_ONLY = ("/usr", "/etc", "/root", "/var/lib/postgresql")
# Top-level symlinks a merged-/usr system has (/bin -> usr/bin ...), made in the root.
MERGED = ("bin", "sbin", "lib", "lib64", "lib32", "libx32")
CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_KILL",
        "CAP_SETUID", "CAP_SETGID", "CAP_SYS_PTRACE", "CAP_IPC_LOCK"]


def base_mounts(devpts: bool = False) -> list[dict]:
    """The mounts every container here gets, as `runc spec` writes them: /proc, a /dev of
    its own (and /dev/pts), /sys and the cgroup tree read-only."""
    return [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        *([{"destination": "/dev/pts", "type": "devpts", "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}]
          if devpts else []),
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
         "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
    ]


def oci_config(args: list[str], user: tuple[int, int], env: list[str], root: str, hostname: str,
               mounts: list[dict], cgroup: str, hugepage_limit: int | None,
               nofile: int) -> dict:
    """An OCI bundle's config.json as the containers here get it: a read-only root, the
    capabilities CAPS, every device denied, pid/mount/ipc/uts/cgroup namespaces of its own,
    and the 2 MB hugetlb limit a kubelet would ask for (None: none)."""
    resources: dict = {"devices": [{"allow": False, "access": "rwm"}]}
    if hugepage_limit is not None:
        resources["hugepageLimits"] = [{"pageSize": "2MB", "limit": hugepage_limit}]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False, "user": {"uid": user[0], "gid": user[1]},
            "args": args,
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *env],
            "cwd": "/",
            "capabilities": {k: CAPS for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": nofile, "soft": nofile}],
        },
        "root": {"path": root, "readonly": True},
        "hostname": hostname,
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "mount", "ipc", "uts", "cgroup")],
            "cgroupsPath": cgroup,
            "resources": resources,
        },
    }



def remove_cgroup(cgroup: Path) -> None:
    """A container's cgroup removed once its processes have left it (rmdir fails with EBUSY
    while one is still there), within 10 s."""
    for _ in range(100):
        if not cgroup.exists():
            return
        try:
            cgroup.rmdir()
        except OSError:
            time.sleep(0.1)


def release(enabled: list[Path], state, bundle) -> None:
    """The rest of a container's start undone: the hugetlb controller taken back out of the
    subtree_control files it was enabled in (the last first), runc's state directory and the
    bundle removed."""
    for ctl in reversed(enabled):
        try:
            ctl.write_text("-hugetlb")
        except OSError:
            pass
    shutil.rmtree(state, ignore_errors=True)
    shutil.rmtree(bundle, ignore_errors=True)

class NoRuntime(Exception):
    """runc or a cgroup v2 hierarchy with the hugetlb controller is missing: the reason."""


def runtime() -> tuple[str, str]:
    """runc and the cgroup v2 hierarchy it is to use (with the hugetlb controller)."""
    runc = shutil.which("runc")
    if not runc:
        raise NoRuntime("runc not found: run scripts/test.sh, which installs Debian's runc")
    v2 = mounts(SysRoot("/")).get("v2")
    if not v2 or "hugetlb" not in Path(f"{v2}/cgroup.controllers").read_text():
        raise NoRuntime("no cgroup v2 hierarchy with the hugetlb controller")
    return runc, v2


def runc_argv(runc: str, v2: str, state: str, *args: str) -> list[str]:
    """runc where /sys/fs/cgroup is the v2 hierarchy (see the module's docstring)."""
    cmd = shlex.join([runc, "--root", state, *args])
    inner = f"mount --bind {shlex.quote(v2)} /sys/fs/cgroup && exec {cmd}"
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner]


class Pod:
    """One pod with one container, run by runc. `pod_limit` and `container_limit` are
    hugetlb.2MB.max in bytes (None: unlimited); the container's is applied by runc."""

    def __init__(self, pod_limit: int | None, container_limit: int | None,
                 writable: list[str], datadirs: tuple[str, ...] = (),
                 readonly: tuple[str, ...] = ()):
        self.runc, self.v2 = runtime()
        self.uid = str(uuid.uuid4())
        self.id = uuid.uuid4().hex  # a container ID as containerd writes them: 64 hex digits
        self.id += uuid.uuid4().hex
        self.pod_rel = f"kubepods/burstable/pod{self.uid}"
        self.enabled: list[Path] = []  # subtree_control files we put +hugetlb in
        self.made: list[Path] = []  # cgroups we created (the container's is runc's)
        self.state = tempfile.mkdtemp(prefix="hpadvise-runc-state-")
        self.bundle = Path(tempfile.mkdtemp(prefix="hpadvise-runc-bundle-"))
        self.started = False
        # PostgreSQL data directories used inside: their postmaster.pid holds a PID of the
        # container's namespace, which the host's pg_ctl must never signal once it is gone
        self.datadirs = datadirs
        try:
            self._pod_cgroup(pod_limit)
            self._bundle(container_limit, writable, readonly)
            # detached: the container keeps its stdio, so they must not be our pipes
            log = self.bundle / "run.log"
            with open(log, "w") as out:
                r = self._runc("run", "-d", "--bundle", str(self.bundle), self.id, out=out)
            if r.returncode != 0:
                raise RuntimeError(f"runc run failed: {log.read_text().strip()[-400:]}")
            self.started = True
        except BaseException:
            self.remove()
            raise

    # ---- the host's side
    @property
    def cgroup(self) -> Path:
        """The container's cgroup, as the host sees it."""
        return Path(self.v2) / self.pod_rel / self.id

    @property
    def pod_cgroup(self) -> Path:
        return Path(self.v2) / self.pod_rel

    def events(self) -> int:
        """hugetlb.2MB.events 'max' of the container's cgroup: faults refused by a limit."""
        text = (self.cgroup / "hugetlb.2MB.events").read_text()
        return int(text.split("max")[1].split()[0])

    def _pod_cgroup(self, limit: int | None) -> None:
        path = Path(self.v2)
        for part in self.pod_rel.split("/"):
            ctl = path / "cgroup.subtree_control"
            if "hugetlb" not in ctl.read_text().split():
                ctl.write_text("+hugetlb")
                self.enabled.append(ctl)
            path = path / part
            if not path.exists():
                path.mkdir()
                self.made.append(path)
        (path / "hugetlb.2MB.max").write_text("max" if limit is None else str(limit))

    def _bundle(self, limit: int | None, writable: list[str], readonly: tuple[str, ...]
                ) -> None:
        root = self.bundle / "rootfs"
        root.mkdir()
        for name in MERGED:
            if os.path.islink(f"/{name}"):
                os.symlink(os.readlink(f"/{name}"), root / name)
        binds = [(p, "ro") for p in (*READ_ONLY, str(REPO), *readonly) if os.path.exists(p)]
        binds += [(p, "rw") for p in writable]
        mounts_ = [
            *base_mounts(),
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", "mode=1777"]},
            {"destination": "/run", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", "mode=755"]},
        ] + [{"destination": p, "type": "bind", "source": p,
              "options": ["rbind", mode]} for p, mode in binds]
        config = oci_config(["/usr/bin/sleep", "infinity"], (0, 0), ["HOME=/root"], "rootfs",
                            "pod", mounts_, f"/{self.pod_rel}/{self.id}", limit, 4096)
        (self.bundle / "config.json").write_text(json.dumps(config, indent=1))

    def _argv(self, *args: str) -> list[str]:
        return runc_argv(self.runc, self.v2, self.state, *args)

    def _runc(self, *args: str, timeout: int = 120, out=None) -> subprocess.CompletedProcess:
        """runc, its output captured, or into the file `out`."""
        io = {"stdout": out, "stderr": out} if out else {"capture_output": True}
        return subprocess.run(self._argv(*args), text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, **io)

    # ---- inside
    def exec(self, *argv: str, user: str | None = None, timeout: int = 120
             ) -> subprocess.CompletedProcess:
        """A command inside the container (runc exec), as `user` ("uid:gid") or root."""
        extra = ["--user", user] if user else []
        return self._runc("exec", *extra, self.id, *argv, timeout=timeout)

    def popen(self, *argv: str) -> subprocess.Popen:
        """A command inside the container left running, its stdin and stdout (with stderr)
        pipes to us."""
        return subprocess.Popen(self._argv("exec", self.id, *argv), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def pids(self) -> list[int]:
        """The container's processes, as the host numbers them."""
        return [int(x) for x in (self.cgroup / "cgroup.procs").read_text().split()]

    def hpadvise(self, *args: str) -> subprocess.CompletedProcess:
        return self.exec(sys.executable, "-m", "hpadvise.cli", *args)

    def remove(self) -> None:
        if self.started:
            self._runc("delete", "-f", self.id)
            self.started = False
            for d in self.datadirs:
                Path(d, "postmaster.pid").unlink(missing_ok=True)
        remove_cgroup(self.cgroup)
        made, self.made = self.made, []
        for path in reversed(made):
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
        enabled, self.enabled = self.enabled, []
        release(enabled, self.state, self.bundle)
