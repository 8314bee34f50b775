"""The worked example engine of docs/writing-an-engine.md: hpdemo-server, a toy server that maps
`buffer_mb` of memory, on huge pages when its config says `huge_pages = on`.

Everything an engine gives hpadvise is here: discovery with demand and backing, findings from
declared codes, the setting change the plan needs, and the two actions apply runs (the config
file setting and a verified restart), each rebuilt from the journal by rollback. A third party
would ship it as a package with one entry point::

    [project.entry-points."hpadvise.engines"]
    hpdemo = "hpdemo:DemoEngine"
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass

from hpadvise.api.face import (ActionError, Change, Code, Codes, Demand, Engine, EngineOption,
                               File, FileSetting, Instance, Proc, Restart, SysRoot, backing_of,
                               fmt_bytes, pages_for)

CODES = Codes(
    Code("hpdemo.huge_pages.off", "warn", "huge_pages = off", "hpdemo-server's config"),
    Code("hpdemo.huge_pages.fallback", "crit", "huge_pages = on fell back to normal pages",
         "hpdemo-server's config; smaps"),
    Code("hpdemo.huge_pages.active", "ok", "The buffer is on huge pages", "smaps"),
)


def read_config(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        name, eq, value = line.partition("=")
        if eq and not name.strip().startswith("#"):
            out[name.strip()] = value.strip()
    return out


@dataclass
class Demo:
    """The engine's state for one instance (Instance.state)."""
    config: str
    settings: dict[str, str]
    argv: list[str]


class DemoSetting(FileSetting):
    """`name = value` in the server's config file; the old bytes come back on rollback."""
    kind = "hpdemo_setting"
    how = "config file"

    def __init__(self, name: str, value: str, config: str, instance: str | None = None,
                 engine: str = "hpdemo"):
        self.name, self.value, self.config, self.instance = name, value, config, instance

    def spec(self) -> dict:
        return {"engine": "hpdemo", "kind": self.kind, "name": self.name, "value": self.value,
                "config": self.config, "instance": self.instance}

    @property
    def label(self) -> str:
        return f"{self.name} in {self.config}"

    def file(self) -> File:
        return File(self.config)

    def read_value(self, text: str) -> str | None:
        return read_config(text).get(self.name)

    def render(self, current: str | None) -> str:
        lines = [ln for ln in (current or "").splitlines()
                 if ln.partition("=")[0].strip() != self.name]
        return "\n".join(lines + [f"{self.name} = {self.value}"]) + "\n"


class DemoRestart(Restart):
    """Stop the server (SIGTERM), start the same command line, wait for its pid file, and
    verify from smaps that the buffer is on huge pages."""
    kind = "hpdemo_restart"

    @property
    def label(self) -> str:
        return f"restart {self.instance}"

    def _pid(self) -> int | None:
        try:
            pid = int(open(self.s["config"] + ".pid").read())
        except (OSError, ValueError):
            return None
        return pid if os.path.exists(f"/proc/{pid}") else None

    def set(self, value=True) -> None:
        pid = self._pid()
        if pid:
            os.kill(pid, signal.SIGTERM)
            while os.path.exists(f"/proc/{pid}"):
                try:  # reap it when it is our child
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                time.sleep(0.05)
            os.unlink(self.s["config"] + ".pid")
        subprocess.Popen(self.s["argv"], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if self._pid():
                return
            time.sleep(0.05)
        raise ActionError(f"{self.label}: the server did not start")

    def verify(self, value=True) -> tuple[bool, str]:
        pid = self._pid()
        maps = Proc(SysRoot("/"), pid).smaps if pid else None
        if maps is None:
            return False, "not running"
        b = backing_of(maps, 2048)
        return b.kind == "hugetlb", f"{fmt_bytes(b.hugetlb_kb * 1024)} on huge pages"

    def shell(self, new=True) -> list[str]:
        pidfile = shlex.quote(self.s["config"] + ".pid")
        cmd = " ".join(shlex.quote(a) for a in self.s["argv"])
        return [f"kill -TERM $(cat {pidfile}) && rm -f {pidfile}",
                f"(setsid {cmd} </dev/null >/dev/null 2>&1 &)",
                f"until [ -e {pidfile} ]; do sleep 0.1; done"]


class DemoEngine(Engine):
    """hpdemo-server: its buffer on static huge pages when `huge_pages = on`."""
    name = "hpdemo"
    description = "hpdemo-server, the worked example (buffer_mb on huge pages)"
    process_names = ("hpdemo-server",)
    profile_schema = {"huge_pages": (str, ("on", "off"), "on")}
    codes = CODES
    action_kinds = (DemoSetting, DemoRestart)
    applies = "sets huge_pages, restarts (with --restart) and verifies"
    # An option of its own on `check`: a server that is not running, sized from its config.
    options = (EngineOption("--demo-config", "Also size a stopped hpdemo-server from its "
                            "config file (repeatable).", "FILE", ("check",)),)

    def discover(self, host, procs, targets) -> list[Instance]:
        out = []
        for config in targets.get("demo_config"):
            text = procs.sr.read(config)
            iid = f"hpdemo:{config}"
            inst = Instance(self.name, iid, f"hpdemo-server {config} (stopped)", False)
            if text is None:
                inst.errors.append(f"--demo-config {config}: cannot read it")
            else:
                inst.settings = read_config(text)
                inst.state = Demo(config, inst.settings, [])
                size = int(inst.settings.get("buffer_mb", "16")) << 20
                inst.demand = Demand(iid, size, host.default_hugepage_kb or 2048,
                                     {kb: pages_for(size, kb * 1024)
                                      for kb in host.page_sizes_kb}, True, "buffer_mb")
            out.append(inst)
        for p in procs.by_name(*self.process_names):
            argv = list(p.cmdline)
            if len(argv) < 3:  # exited while we looked: nothing to read
                continue
            config = argv[-1]
            # A script's cmdline starts with its interpreter; the server is started by the
            # script's own path (so that its comm stays hpdemo-server).
            argv = argv[1:]
            settings = read_config(procs.sr.read(config) or "")
            size = int(settings.get("buffer_mb", "16")) << 20
            iid = f"hpdemo:{config}"  # its config's path: the same server after a restart
            inst = Instance(self.name, iid, f"hpdemo-server {config}", True, pid=p.pid,
                            owner=procs.user(p.uid), settings=settings,
                            state=Demo(config, settings, argv))
            maps = p.smaps
            page_kb = host.default_hugepage_kb or 2048
            held = 0
            if maps is not None:
                b = backing_of(maps, host.thp.pmd_size_kb, host.base_page_bytes // 1024)
                inst.backing, inst.backing_page_kb = b.kind, b.page_kb
                held = b.held_pages(maps, page_kb)
            # One private mapping of the buffer, rounded up to whole pages by mmap.
            inst.demand = Demand(iid, size, page_kb,
                                 {kb: pages_for(size, kb * 1024) for kb in host.page_sizes_kb},
                                 True, "buffer_mb", held_pages=held)
            out.append(inst)
        return out

    def findings(self, inst, host, profile):
        d: Demo = inst.state
        if d.settings.get("huge_pages") != "on":
            return [CODES["hpdemo.huge_pages.off"]("The buffer is on 4 KiB pages.",
                                                   f"{d.config}: huge_pages", inst.id)]
        if inst.backing != "hugetlb":
            return [CODES["hpdemo.huge_pages.fallback"](
                "The pool was short at start; the server carried on with normal pages.",
                f"smaps: {inst.backing}", inst.id)]
        return [CODES["hpdemo.huge_pages.active"]("Running on huge pages.", "", inst.id)]

    def changes(self, inst, page_kb, host, profile):
        want = profile.engine(self.name).get("huge_pages", "on")
        cur = inst.state.settings.get("huge_pages", "off")
        if cur == want:
            return []
        return [Change("setting", "huge_pages", cur, want, "the profile", inst.id, restart=True)]

    def actions(self, inst, changes):
        out = []
        for ch in changes:
            if ch.kind == "setting" and ch.instance == inst.id:
                a = DemoSetting(ch.target, ch.recommended, inst.state.config, inst.id)
                out.append((a, a.wanted))
        return out

    def restart_action(self, inst):
        d: Demo = inst.state
        return DemoRestart(engine=self.name, instance=inst.id, config=d.config, argv=d.argv)
