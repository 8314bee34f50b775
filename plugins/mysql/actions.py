"""MySQL/MariaDB's apply actions: an option in an option file, and a restart verified from the
server's smaps and its error log."""

from __future__ import annotations

import os
import pwd
import shlex
import signal
import subprocess
import time
from pathlib import Path

from hpadvise.api.face import (ActionError, File, FileSetting, Keep, Proc, ProcTable, Restart,
                               SysRoot, exited, fmt_bytes, keep_of, keeper, reach,
                               systemd_unit)

from .conf import SERVER_GROUP, default_files, norm, strip_value
from .layers import effective
from .preflight import would_start


def spec_of(s, instance: str) -> dict:
    """What the actions of one server carry into the journal: how to find, stop and start it."""
    spec = {"engine": "mysql", "instance": instance, "datadir": s.datadir, "socket": s.socket,
            "pid": s.pid, "argv": list(s.argv), "cwd": s.cwd or "/", "owner": s.owner,
            "log_error": s.log_error,
            "supervisor": list(s.supervisor[1]) if s.supervisor else None}
    if s.root is not None:  # its paths are its root's: journaled with where that root is
        spec["root"] = s.root.to_spec()
    return spec


def option_target(s) -> tuple[str, bool]:
    """Where large_pages goes: a drop-in in the last include directory the server reads,
    else the last option file with a server group, else /etc/mysql/my.cnf."""
    if s.options.includedirs:
        return f"{s.options.includedirs[-1].rstrip('/')}/99-hpadvise.cnf", True
    if s.options.group_files:
        return s.options.group_files[-1], False
    files, _ = default_files(s.argv, None)
    return (files[0] if files and files[0] != "/etc/my.cnf" else "/etc/mysql/my.cnf"), False


def server_greets(sock: str | None) -> bool:
    """A MySQL/MariaDB server accepts connections on `sock`: it sends its handshake first."""
    if not sock or not os.path.exists(sock):
        return False
    import socket as so
    try:
        with so.socket(so.AF_UNIX) as c:
            c.settimeout(1)
            c.connect(sock)
            return bool(c.recv(1))
    except OSError:
        return False


class MyOption(FileSetting):
    """One server option in an option file: a drop-in file of its own in the server's include
    directory, or the option's line in the [mysqld] group of the file that has one. Restore puts
    the file's old bytes back (or removes the drop-in)."""
    kind = "my_option"
    how = "option file"

    def __init__(self, path: str, name: str, value: str, dropin: bool, **server):
        self.path, self.name, self.value, self.dropin, self.s = path, name, value, dropin, server
        self.instance = server.get("instance")

    def spec(self) -> dict:
        return {**self.s, "kind": self.kind, "path": self.path, "name": self.name,
                "value": self.value, "dropin": self.dropin}

    @property
    def label(self) -> str:
        return f"{self.name} in {self.path}"

    def root_spec(self) -> dict | None:
        return self.s.get("root")

    def file(self) -> File:
        try:  # a server in its own root: its own file there, reached from the host
            return File(reach(self.s.get("root"), self.path), 0o644, 0, 0)
        except OSError as exc:  # roots.RootGone
            raise ActionError(f"{self.label}: {exc.strerror or exc}") from None

    @staticmethod
    def normal(value: str | None) -> str:
        return (value or "").upper()  # ON, on and On are one value (mysys/my_getopt.c)

    def _server_lines(self, text: str):
        """(index, line, whether it sets this option) of every line in a group the server
        reads; a [client] group's lines (a password, often) are never looked at."""
        group = None
        for n, line in enumerate(text.splitlines()):
            st = line.strip()
            if st.startswith("["):
                group = st.strip("[] ").lower()
                if SERVER_GROUP.fullmatch(group):
                    yield n, line, False
                continue
            if group is not None and SERVER_GROUP.fullmatch(group):
                name = st.partition("=")[0]
                yield n, line, bool(st) and st[0] not in "#;" and \
                    norm(name) in (self.name, f"loose_{self.name}")

    def read_value(self, text: str) -> str | None:
        """The value the server takes: the last occurrence in its groups (MySQL Reference
        Manual, 6.2.2.2 Using Option Files)."""
        value = None
        for _, line, sets in self._server_lines(text):
            if sets:
                _, eq, v = line.strip().partition("=")
                value = strip_value(v) if eq else "ON"
        return value

    def verify(self, value: dict) -> tuple[bool, dict]:
        """The file holds the value, and the server would take it at its next start: every
        option file read again in its order, the command line and SET PERSIST after them
        (layers.effective); a later occurrence elsewhere is named."""
        ok, actual = super().verify(value)
        if not ok:
            return ok, actual
        got = effective(self.s.get("argv") or (), self.s.get("datadir"), self.name,
                        self.file().path, self.s.get("root"))
        if got is None:  # a file the server does not read (a copy): the file's word only
            return True, actual
        eff, where = got
        if self.normal(eff) != self.normal(value["value"]):
            return False, {**actual, "value": f"{eff} from {where}"}
        return True, actual

    def appendix(self) -> str:
        # Groups may repeat and "if an option is specified multiple times, the last instance
        # takes precedence" (MySQL Reference Manual, 6.2.2.2 Using Option Files).
        return f"[mysqld]\n{self.name} = {self.value}\n"

    def render(self, current: str | None) -> str:
        if self.dropin:
            return (f"# Written by hpadvise apply (undo: hpadvise rollback)\n[mysqld]\n"
                    f"{self.name} = {self.value}\n")
        # The occurrence that wins is the last one in a server group: change that one; with
        # none, add it at the end of the last server group's section (after every earlier
        # line, so that it wins too).
        lines = (current or "").splitlines()
        found = list(self._server_lines(current or ""))
        setting = [n for n, _, sets in found if sets]
        line = f"{self.name} = {self.value}"
        if setting:
            lines[setting[-1]] = line
        elif found:
            tail = max(n for n, text, _ in found if text.strip())
            lines.insert(tail + 1, line)
        else:
            lines += ["[mysqld]", line]
        return "\n".join(lines) + "\n"


class MyRestart(Restart):
    """Restart a server and check from smaps and its error log that it got its huge pages.
    Through systemd when it is a unit; otherwise a clean shutdown (SIGTERM) and the same
    command line again as the same user (its mysqld_safe parent's, when it has one)."""
    kind = "my_restart"

    @property
    def label(self) -> str:
        return f"restart {self.instance or 'mysql:' + str(self.s.get('datadir'))}"

    def _pid(self) -> int | None:
        """The server's current pid: a live (not zombie) mariadbd/mysqld with the same command
        line, or the pid we knew if it still runs."""
        live = [p for p in ProcTable(SysRoot("/")).by_name("mariadbd", "mysqld")
                if not exited(p.pid)]
        for p in live:
            if p.cmdline and tuple(p.cmdline) == tuple(self.s["argv"]):
                return p.pid
        return next((p.pid for p in live if p.pid == self.s.get("pid")), None)

    @property
    def _argv(self) -> list[str]:
        """What starts the server: its supervisor's command line, else its own."""
        return self.s.get("supervisor") or self.s["argv"]

    def _start(self, keep: Keep | None = None) -> tuple[list[str], dict]:
        """The command line that starts the server again, and its subprocess arguments: where
        the server ran (`keep`: its cgroup and NUMA memory policy, read before it stopped)."""
        argv = self._argv
        try:
            pw = pwd.getpwnam(self.s["owner"]) if self.s.get("owner") else None
        except KeyError:
            raise ActionError(f"{self.label}: the server's user {self.s['owner']!r} does not "
                              "exist on this host") from None
        kw: dict = {"cwd": self.s.get("cwd") or "/", "start_new_session": True,
                    "stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
                    "stderr": subprocess.DEVNULL,
                    "env": {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                            "HOME": pw.pw_dir if pw else "/"}}
        drop = pw and os.geteuid() == 0 and pw.pw_uid != 0 and not self.s.get("supervisor")
        run = keeper(keep, pw.pw_uid if drop else None, pw.pw_gid if drop else None)
        if run is not None:
            kw.update(preexec_fn=run)
        elif drop:
            kw.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
        return argv, kw

    def preflight(self) -> None:
        """Before anything stops: the server's own parser must accept the option files and
        command line it would start with (preflight.would_start)."""
        pid = self._pid()
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)") \
            if pid and os.path.exists(f"/proc/{pid}") else None
        self.refuse_unless(*would_start(self.s["argv"], exe, self.s.get("owner")),
                           "option files")

    def set(self, value=True) -> None:
        self.preflight()
        pid = self._pid()
        unit = systemd_unit(pid) if pid else None
        if unit:
            r = subprocess.run(["systemctl", "restart", unit], capture_output=True, text=True,
                               timeout=900)
            if r.returncode != 0:
                raise ActionError(f"{self.label} failed: {r.stderr.strip()[-300:]}")
            return
        keep = keep_of(pid, self.s.get("thp_mode"))  # before it stops: a start by hpadvise
        # would lose them
        argv, kw = self._start(keep)  # before it stops too: what cannot start fails here
        if pid:
            os.kill(pid, signal.SIGTERM)  # mysqld shuts down cleanly on SIGTERM
            deadline = time.time() + 900
            while not exited(pid):
                if time.time() > deadline:
                    raise ActionError(f"{self.label}: pid {pid} did not stop within 15 minutes")
                time.sleep(0.1)
        try:
            proc = subprocess.Popen(argv, **kw)
        except OSError as exc:
            raise ActionError(f"{self.label}: cannot start {argv[0]}: {exc.strerror}") from None
        except subprocess.SubprocessError as exc:  # the move into its cgroup or policy
            raise ActionError(f"{self.label}: cannot start {argv[0]} where it ran "
                              f"({keep.describe()}): {exc}") from None
        deadline = time.time() + 900
        while time.time() < deadline:
            if server_greets(self.s.get("socket")):
                self.s["pid"] = self._pid()
                return
            if proc.poll() is not None and not self.s.get("supervisor"):
                raise ActionError(f"{self.label}: the server exited at start"
                                  + _log_tail(self.s.get("log_error")))
            time.sleep(0.2)
        raise ActionError(f"{self.label}: not accepting connections after 15 minutes")

    def restored(self, old=None) -> str | None:
        return None if self._pid() else "the server is not running"

    def pid(self) -> int | None:
        return self._pid()

    def running(self) -> bool:
        return self._pid() is not None

    def verify(self, value=True) -> tuple[bool, str]:
        from .discovery import fallback_lines
        from .state import Server
        pid = self._pid()
        if not pid:
            return False, "not running"
        maps = [m for m in Proc(SysRoot("/"), pid).smaps or [] if m.hugetlb]
        srv = Server(pid=pid, datadir=self.s.get("datadir"),
                     settings={"log_error": self.s.get("log_error") or ""})
        bad = fallback_lines(SysRoot("/"), srv) or []
        if bad:
            return False, f"fell back to normal pages: {bad[-1].strip()[-160:]}"
        if not maps:
            return False, "no huge page mappings in smaps"
        kb_ = sum(m.size_kb for m in maps)
        return True, f"{len(maps)} huge page mappings, {fmt_bytes(kb_ * 1024)}"

    def shell(self, new=True) -> list[str]:
        """The same restart for a root shell: the unit, or SIGTERM, wait until the process is
        gone, start the same command line as its user, and wait for its socket."""
        pid = self._pid()
        unit = systemd_unit(pid) if pid else None
        if unit:
            return [f"systemctl restart {shlex.quote(unit)}"]
        argv = self._argv
        cmd = " ".join(shlex.quote(a) for a in argv)
        owner = self.s.get("owner")
        if owner and owner != "root" and not self.s.get("supervisor"):
            cmd = f"runuser -u {shlex.quote(owner)} -- {cmd}"
        cmd = keep_of(pid, self.s.get("thp_mode")).shell(cmd)
        sock = shlex.quote(self.s.get("socket") or "/run/mysqld/mysqld.sock")
        out = []
        if pid:  # gone, or a zombie its parent has not reaped yet
            out += [f"kill -TERM {pid}",
                    f"while kill -0 {pid} 2>/dev/null && ! grep -qs '^State:[[:space:]]*Z' "
                    f"/proc/{pid}/status; do sleep 0.2; done"]
        cwd = shlex.quote(self.s.get("cwd") or "/")
        out += [f"(cd {cwd} && setsid {cmd} </dev/null >/dev/null 2>&1 &)",
                # as set() does: up to 15 minutes for InnoDB recovery before it answers
                f"n=0; until [ -S {sock} ]; do n=$((n + 1)); [ $n -le 4500 ] || {{ echo "
                f"'hpadvise: the server did not start; see its error log' >&2; exit 1; }}; "
                "sleep 0.2; done"]
        return out


def _log_tail(path: str | None) -> str:
    if not path:
        return ""
    try:
        lines = [ln for ln in Path(path).read_text(errors="replace").splitlines()
                 if "ERROR" in ln or "[ERROR]" in ln]
    except OSError:
        return ""
    return f": {lines[-1].strip()[-200:]}" if lines else ""
