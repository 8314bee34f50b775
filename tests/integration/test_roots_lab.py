"""The server lab of Debian roots (scripts/roots.sh, tests/roots.py): Oracle MySQL 9.7 (sid),
MariaDB 11.8 and PostgreSQL 17 (trixie) start inside their roots as a container holds them,
answer with their own versions through the roots' own clients, run from the host's point of
view as processes whose root is the root and which have a PID namespace of their own, and
leave no process behind. The same under runc, with pg_ctl's command-line options, and when the
unshare process is killed outright.

Other sessions may run servers in the same cached roots: "no process left" means none of this
server's PID namespace (or container) in the root."""

import os
import signal
import subprocess
import time

import pytest

from roots_container import RootContainer
from roots_procs import _status, alive, ns_of, procs_in

pytestmark = pytest.mark.integration

CASES = [
    ("mysql", ["--innodb-buffer-pool-size=256M"], "select version(), @@innodb_buffer_pool_size",
     "9.7.", "268435456"),
    ("mariadb", ["--innodb-buffer-pool-size=256M"],
     "select version(), @@innodb_buffer_pool_size", "11.8.", "268435456"),
    ("postgres", {"shared_buffers": "256MB"},
     "select current_setting('server_version'), current_setting('shared_buffers')", "17.",
     "256MB"),
]


@pytest.fixture
def lab(root_lab):
    return root_lab


def nspid(pid: int) -> list[int]:
    return [int(x) for x in _status(pid)["NSpid"].split()]


def left_in_root(s) -> list[int]:
    return [p for p in procs_in(s.root) if s.ns and ns_of(p) == s.ns and alive(p)]


def assert_gone(s, pid: int) -> None:
    """No process of the server's namespace in the root, its directory and temp directories
    removed, nothing of it mounted on the host."""
    assert not alive(pid)
    assert left_in_root(s) == []
    assert not s.host(s.dir).exists()
    assert not os.path.exists(s.tmp)
    mounts = open("/proc/self/mounts").read()
    assert s.tmp not in mounts and f"{s.root}/proc" not in mounts


@pytest.mark.parametrize("engine,options,query,version,memory", CASES,
                         ids=[c[0] for c in CASES])
def test_server_in_its_root(lab, engine, options, query, version, memory):
    s = lab(engine, options)
    s.start()
    pid = s.pid
    row = s.sql(query).strip().replace("|", "\t").split("\t")
    assert row[0].startswith(version), row
    assert row[1] == memory, row
    # from the host: the root's server, its root the root, a PID namespace of its own
    assert _status(pid)["Name"] == {"mysql": "mysqld", "mariadb": "mariadbd",
                                    "postgres": "postgres"}[engine]
    assert os.readlink(f"/proc/{pid}/root") == str(s.root)
    ids = nspid(pid)
    assert len(ids) == 2 and ids[0] == pid and ids[1] != pid, ids
    assert ns_of(pid) != ns_of(os.getpid())
    # the root's own server user (trixie's postgres is uid 100 here, the host's messagebus)
    assert int(_status(pid)["Uid"].split()[0]) == s.uid
    s.stop()
    assert not alive(pid)
    assert left_in_root(s) == []
    s.destroy()
    assert_gone(s, pid)


def test_pg_ctl_options_in_postmaster_opts(lab):
    """pg_ctl -o '-c ...' start inside the root: postmaster.opts records the options."""
    s = lab("postgres", ["-c", "shared_buffers=256MB"], pg_ctl=True)
    s.start()
    assert s.sql("show shared_buffers").strip() == "256MB"
    opts = s.host(f"{s.datadir}/postmaster.opts").read_text()
    assert '"-c" "shared_buffers=256MB"' in opts, opts
    assert len(nspid(s.pid)) == 2
    pid = s.pid
    s.destroy()
    assert_gone(s, pid)


def test_unshare_killed_takes_the_server(lab):
    """The unshare process killed outright: its namespace's PID 1 dies with it (--kill-child)
    and the kernel ends every process of the namespace, the server's user notwithstanding."""
    s = lab("postgres", {"shared_buffers": "256MB"})
    s.start()
    pid, kids = s.pid, left_in_root(s)
    assert pid in kids and len(kids) > 2  # the shell, the postmaster and its children
    os.kill(s.proc.pid, signal.SIGKILL)
    deadline = time.time() + 30
    while left_in_root(s) and time.time() < deadline:
        time.sleep(0.1)
    assert left_in_root(s) == []
    s.destroy()
    assert_gone(s, pid)


def test_server_under_runc(lab):
    """The root as a runc bundle's read-only rootfs: the server is the container's init."""
    s = lab("postgres", {"shared_buffers": "256MB"}, cls=RootContainer)
    s.start()
    assert s.sql("show server_version").startswith("17.")
    pid = s.pid
    assert nspid(pid)[1:] == [1]
    assert pid in s.processes()
    r = subprocess.run(s.exec_argv(["touch", "/usr/hplab-test"]), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "Read-only file system" in r.stderr, r
    cgroup = s.cgroup
    s.destroy()
    assert not alive(pid)
    assert not cgroup.exists()
    assert not s.host(s.dir).exists() and not os.path.exists(s.tmp)
    assert not os.path.exists(s.state) and not s.bundle.exists()
