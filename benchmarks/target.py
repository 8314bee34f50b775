"""What `validate` needs of an engine: one server to measure, behind one small interface.

An engine that supports validate lists its benchmarks in `Engine.benches` and returns a
BenchTarget from `Engine.bench_target(opts)`: a scratch server it creates, or a running
instance (`opts.instance`). The runner knows nothing else of the engine: it switches the host's
knobs, asks the target to restart, prewarm and run the driver, and reads the backing it reports.
Constructing a target only checks (binaries, the instance, permissions) and changes nothing;
`setup(o, progress)` creates what it needs from the settled options, `destroy()` removes it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from typing import Any, Callable

from hpadvise.act.face import Action
from hpadvise.api.face import InputError, run_without_huge_pages


class BenchTarget:
    """The server under test. Subclasses set the attributes in __init__ or setup()."""

    label: str = ""  # "scratch cluster", "instance postgres:5432", for the report
    binary: str = ""  # the server binary it runs and where it was found, for the report
    prewarm_note: str = ""  # how it prewarms where that differs from its usual way
    # what the scratch servers run with that differs from the user's server, for the report
    settings_note: str = ""
    wal_bytes: int = 0  # the disk a server's log (WAL, redo) may take beside its data
    buffers_setting: str = ""  # the engine's name for its buffers, e.g. "shared_buffers"
    buffers: str = ""  # their size as the engine writes it
    instance_ref: str = ""  # what `apply --instance` matches this server by (its data directory)
    owner: str = ""  # OS user running the server (owns the benchmark's log directory)
    tmpdir: str = ""  # a directory of the target's for the driver's logs
    restarts_instance: bool = False  # a real instance: restart it again when validate ends
    # restart() also starts it when stopped: validate may stop a scratch server to give its
    # memory back before growing a pool (its 4 KiB shared memory and page cache fragment RAM)
    restart_starts: bool = False

    def buffers_bytes(self) -> int:
        from hpadvise.api.face import parse_bytes
        return parse_bytes(self.buffers, self.buffers_setting)

    def setup(self, o, progress) -> None:
        """Create the server and the benchmark database from the settled options `o` (check's
        result; those bench_target was given are an earlier value, before the host decided
        the scale, clients and timings); `progress(text)` says what is going on."""
        raise NotImplementedError

    def server(self) -> str:
        """Product and version, e.g. "PostgreSQL 15.8"."""
        raise NotImplementedError

    def restart(self) -> None:
        raise NotImplementedError

    def hugepages_off(self) -> list[tuple[Action, Any]]:
        """The engine's own steps for the "huge pages off" variant (action, value)."""
        raise NotImplementedError

    def page_size_steps(self, page_kb: int) -> list[tuple[Action, Any]] | str:
        """The engine's own steps that put the server on huge pages of `page_kb` (the
        "hugepages-1g" variant), or why it cannot choose its page size."""
        return "this engine cannot choose the page size its buffers use"

    def pid(self) -> int | None:
        """The server's main process, where THP_enabled in /proc/PID/status says whether it
        turned THP off for itself."""
        return None

    def prewarm(self) -> None:
        """Read every table and index into the buffers, so that runs start alike."""
        raise NotImplementedError

    def driver(self, bench: str, scale: int, load: bool = True):
        """The benchmark driver (hpadvise.benchmarks.pgbench.Pgbench or sysbench.Sysbench) for
        this server's benchmark database, after loading its data (unless load is False: a
        twin has it already)."""
        raise NotImplementedError

    def twin_blocker(self) -> str | None:
        """Why this server cannot be doubled for the resident and simultaneous designs, or
        None when twin() can."""
        return "this engine's benchmark server cannot be copied yet"

    def twin(self, own: Callable[["BenchTarget"], object]) -> "BenchTarget":
        """Another server with this one's data, settings and owner, on its own port and
        directory, running; this one is running again too. `own` is handed the copy as soon
        as its directory is whole, before either server starts: from then on an interrupt
        (SIGTERM is raised where it lands) finds it among the servers the runner stops and
        removes. An interrupt while this one restarted used to leave the copy's directory
        behind."""
        raise NotImplementedError

    def backing(self) -> str | None:
        """What the server's buffers sit on now: hugetlb, thp, 4k, or None if unknown."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop a scratch server (releasing its huge pages); a real instance keeps running."""

    def reset_data(self) -> None:
        """Put a stopped server's data back as it was before the first run (a replay's
        statements write; benchmarks/fixed.py); nothing where the data is not reset."""

    def destroy(self) -> None:
        """Remove what setup() created."""

    def scratch_dir(self) -> str | None:
        """The directory of a scratch server's own files, its data among them (written out
        to disk before the first epoch: write_out), or None where it has none (a running
        instance)."""
        return None


# ---- helpers for engines' scratch servers

class ScratchServer:
    """A throwaway server in a scratch directory of its own, run as an OS user. The
    constructor of a subclass makes the directory with `made` (journaled before it exists,
    removed again when building the server in it fails); `destroy` stops the server and
    removes the directory. Subclasses say where the pid file and the log are, and how the
    server starts and stops."""

    tmp: str
    log: str

    @property
    def pid_file(self) -> str:
        raise NotImplementedError

    def made(self, user: str, prefix: str, base: str | None, what: str, pidfile: str,
             stop: str, build: Callable[[], object]) -> None:
        """The scratch directory (owned_tmpdir: `pidfile` relative to it, `stop` the signal
        that stops the server at once), then `build()` in it; the directory goes again when
        build fails."""
        self.pw, self.tmp = owned_tmpdir(user, prefix, base, what, pidfile=pidfile, stop=stop)
        self.user = user
        try:
            build()
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise

    def logtail(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-800:]
        except OSError:
            return ""

    @property
    def pid(self) -> int | None:
        """The server's PID from its pid file, while that process runs (a zombie does not:
        see gone())."""
        try:
            with open(self.pid_file) as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return None if gone(pid) else pid

    def running(self) -> bool:
        return self.pid is not None

    def stop(self) -> None:
        raise NotImplementedError

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def mark_scratch(datadir: str, pw) -> None:
    """Mark a scratch server's data directory as validate's own: check leaves it out of the
    host's instances (hpadvise.api.model.SCRATCH_MARK); copies of the directory keep the mark."""
    from hpadvise.api.face import SCRATCH_MARK
    path = os.path.join(datadir, SCRATCH_MARK)
    with open(path, "w") as f:
        f.write("a scratch server of hpadvise validate; removed with it\n")
    os.chown(path, pw.pw_uid, pw.pw_gid)


# Where outgoing connections take their local ports, and the ports kept from them: the kernel's
# net.ipv4.ip_local_port_range (default "32768 60999") and ip_local_reserved_ports
# (Documentation/networking/ip-sysctl.rst).
PORT_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
RESERVED_PORTS = "/proc/sys/net/ipv4/ip_local_reserved_ports"
LISTEN_FLOOR = 10000  # above the ports services are commonly configured on (5432, 3306, 6379)


def listen_ports(range_text: str, reserved_text: str = "") -> list[int]:
    """The ports a server started here may listen on: from LISTEN_FLOOR up, outside the
    ephemeral range (a client's connection may take a port from it between the check and the
    server's bind, and the server then fails with "Address already in use") and outside the
    reserved ones. Empty where the range's text is not two numbers."""
    try:
        lo, hi = (int(x) for x in range_text.split())
    except ValueError:
        return []
    reserved: set[int] = set()
    for part in filter(None, reserved_text.strip().split(",")):
        a, _, b = part.partition("-")
        if a.strip().isdigit() and (b or a).strip().isdigit():
            reserved.update(range(int(a), int(b or a) + 1))
    return [p for p in (*range(LISTEN_FLOOR, lo), *range(hi + 1, 65536)) if p not in reserved]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing holds now, for a server about to start: a random
    one of listen_ports(), else (no such port free) one the kernel picks."""
    import random

    def text(path: str) -> str:
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return ""

    ports = listen_ports(text(PORT_RANGE), text(RESERVED_PORTS))
    for port in random.sample(ports, min(len(ports), 64)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Told of each scratch directory as it is made (path, pid file in it, stop signal): validate's
# journal (switching.Switcher), so that a rollback after a kill stops its server and removes it.
ON_SCRATCH: list[Callable[[str, str, str], None]] = []


def scratch_path(prefix: str, base: str | None = None) -> str:
    """A new directory's path in `base` (the temp directory): a random name, as mkdtemp
    makes them, chosen before it is made (os.mkdir then fails rather than reuse one)."""
    import secrets
    return os.path.join(base or tempfile.gettempdir(), prefix + secrets.token_hex(8))


def owned_tmpdir(user: str, prefix: str, base: str | None, what: str, pidfile: str = "",
                 stop: str = "TERM"):
    """A temp directory (0755) owned by `user`, for a scratch server run as that user; its
    server writes its PID into `pidfile` (relative) and stops at once on SIG`stop`."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise InputError(f"no OS user {user!r} to run {what} as") from None
    tmp = scratch_path(prefix, base)
    for told in ON_SCRATCH:  # journaled before it exists: no kill can leave it unrecorded
        told(tmp, pidfile, stop)
    os.mkdir(tmp, 0o700)
    os.chmod(tmp, 0o755)
    os.chown(tmp, pw.pw_uid, pw.pw_gid)
    return pw, tmp


def run_as(pw) -> dict:
    """subprocess arguments that run a command as `pw`'s user when we are root."""
    if os.geteuid() == 0:
        return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    return {}


def gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie has: api's exited()); reaps it when it is our
    child (a restarted server can be). A server stopped by pg_ctl or a signal is init's
    child by then, and waiting until an init reaps it (late, or never under a container's
    PID 1 that does not) would hold every stop up."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    except ChildProcessError:
        pass
    from hpadvise.api.face import exited
    return exited(pid)


def write_out(root: str) -> None:
    """fsync every regular file and directory under `root`, as initdb's sync does: the
    dirty pages a load or a copy left go to disk now, instead of when the flusher takes
    pages older than vm.dirty_expire_centisecs (30 s by default: Documentation/admin-guide/
    sysctl/vm.rst). Files that go while it walks are passed over."""
    for d, _, files in os.walk(root):
        for path in [*(os.path.join(d, f) for f in files), d]:
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode) and path != d:
                    continue  # sockets, fifos, links: nothing of the data
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def wait_gone(pid: int | None, seconds: float) -> None:
    deadline = time.time() + seconds
    while pid and not gone(pid) and time.time() < deadline:
        time.sleep(0.05)


def need_binary(path: str | None, what: str, package: str) -> str:
    """The path of an executable, or one line saying what to install."""
    if path and (os.access(path, os.X_OK) or shutil.which(path)):
        return path
    raise InputError(f"{what} not found; install it (Debian: apt-get install {package})")


def check_run(cmd: list[str], no_huge_pages: bool = False, **kw) -> subprocess.CompletedProcess:
    """`cmd` run to its end, an error naming its program where it fails; `no_huge_pages`: it
    and what it starts take no page of the host's pools (kit/nohuge.py)."""
    kw.setdefault("cwd", "/")
    r = (run_without_huge_pages if no_huge_pages else subprocess.run)(
        cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed: {r.stderr.strip()[-400:]}")
    return r


def own_copy(path: str, directory: str, pw) -> str:
    """A copy of the user's file (a --script) in a scratch server's directory, the server's
    OS user's alone: the client runs as that user, who may not read the original."""
    dest = os.path.join(directory, os.path.basename(path))
    shutil.copyfile(path, dest)
    os.chmod(dest, 0o600)
    os.chown(dest, pw.pw_uid, pw.pw_gid)
    return dest
