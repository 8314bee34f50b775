"""Patroni, the cluster manager: whether it manages a cluster, and what it is called there.

Patroni starts the postmaster itself (its parent process is `patroni CONFIG.yml`), keeps the
cluster's parameters in its distributed configuration (DCS) and restarts members itself;
ALTER SYSTEM values are not propagated to the other members, and a restart behind its back
can make it act (Patroni docs, "Dynamic Configuration Settings", "patronictl"). So hpadvise
names the manager in check, and apply changes nothing behind it: it prints the patronictl
commands that set the parameters through the DCS and restart the members (replicas first).

Patroni daemonizes the postmaster (its parent is PID 1), so a running Patroni is linked to
the cluster whose data directory its configuration names (`postgresql.data_dir`). Then its
REST API (`GET /patroni`: scope, name, role) at `restapi.listen`. Only those two keys of the
configuration are read; it holds passwords, which are never read out or shown.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from hpadvise.api.face import ProcTable, SysRoot


@dataclass(frozen=True)
class Manager:
    name: str  # "patroni"
    config: str | None  # its configuration file
    scope: str | None = None
    member: str | None = None
    role: str | None = None
    api: str | None = None  # the REST API's address
    dcs: str | None = None  # where the cluster's configuration lives (_dcs)
    # The layers of Patroni's configuration a parameter can come from (LAYER_NAMES only):
    # this member's own file (postgresql.parameters), which wins over the cluster's dynamic
    # configuration (GET /config: postgresql.parameters), and postgresql.custom_conf, the
    # file Patroni builds postgresql.conf on instead of postgresql.base.conf.
    local: tuple[tuple[str, str], ...] = ()
    dynamic: tuple[tuple[str, str], ...] | None = None  # None: /config unread
    custom_conf: str | None = None

    def describe(self) -> str:
        who = ", ".join(x for x in (f"scope {self.scope}" if self.scope else "",
                                    f"member {self.member}" if self.member else "",
                                    self.role or "") if x)
        return f"Patroni ({who or 'its REST API unreadable'})"

    def commands(self, changes: dict[str, str]) -> list[str]:
        """What to run instead of ALTER SYSTEM and pg_ctl (patronictl(1))."""
        cfg = f"-c {self.config} " if self.config else ""
        params = " ".join(f"-p {k}={v}" for k, v in changes.items())
        scope = self.scope or "SCOPE"
        return [f"patronictl {cfg}edit-config {scope} {params} --force",
                f"patronictl {cfg}restart {scope} --role replica --force",
                f"patronictl {cfg}restart {scope} --role primary --force"]


# The parameters whose layers hpadvise reads in Patroni's configuration: those the plan
# changes and those that size shared memory. Nothing else of the file is read (it holds
# passwords, and so may postgresql.parameters: primary_conninfo).
LAYER_NAMES = ("huge_pages", "huge_page_size", "shared_buffers", "max_connections",
               "shared_memory_type")


def _block(text: str, *path: str) -> str | None:
    """The lines under `a:` / `  b:` ... in a YAML file, by indentation alone (block style,
    as Patroni's documentation writes its configuration)."""
    for depth, name in enumerate(path):  # the first key at the top level
        lead = "" if depth == 0 else r"[ \t]*"
        mt = re.search(rf"^({lead}){re.escape(name)}:[ \t]*(?:#.*)?\n", text, re.M)
        if not mt:
            return None
        indent, lines = len(mt.group(1).expandtabs()), []
        for line in text[mt.end():].splitlines():
            if line.strip() and not line.lstrip().startswith("#") \
                    and len(line) - len(line.lstrip()) <= indent:
                break
            lines.append(line)
        text = "\n".join(lines) + "\n"
    return text


def _scalars(block: str | None, names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """name: value pairs of a block, for `names` only, quotes and comments dropped."""
    out = []
    for name in names:
        mt = re.search(rf"^[ \t]+{name}:[ \t]*(?:'([^']*)'|\"([^\"]*)\"|([^#\n]*?))"
                       r"[ \t]*(?:#.*)?$", block or "", re.M)
        if mt:
            out.append((name, next(g for g in mt.groups() if g is not None)))
    return tuple(out)


def member_layers(text: str) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """This member's own parameters (postgresql.parameters, LAYER_NAMES only) and its
    custom_conf, from its configuration file."""
    pg = _block(text, "postgresql")
    local = _scalars(_block(text, "postgresql", "parameters"), LAYER_NAMES)
    custom = dict(_scalars(pg, ("custom_conf",))).get("custom_conf") if pg else None
    return local, custom


def _key(text: str, section: str, key: str) -> str | None:
    """`section: key:` from a YAML file, by that key alone (no YAML parser at check time, and
    nothing else of the file is read: it holds passwords)."""
    mt = re.search(rf"^{section}:\s*\n((?:[ \t]+.*\n?|\s*\n)+)", text, re.M)
    if not mt:
        return None
    v = re.search(rf"^\s+{key}:\s*['\"]?([^'\"\s#]+)", mt.group(1), re.M)
    return v.group(1) if v else None


# The DCS sections of Patroni's configuration (Patroni's documentation, "YAML Configuration
# Settings"), and the namespace its keys live under (default /service/).
DCS_SECTIONS = ("etcd3", "etcd", "consul", "zookeeper", "exhibitor", "kubernetes", "raft")


def _dcs(text: str) -> str | None:
    """The DCS a member's configuration names, and the namespace: what two clusters of the
    same scope name on one host differ by. Only the address keys are read."""
    mt = re.search(r"^namespace:\s*['\"]?([^'\"\s#]+)", text, re.M)
    namespace = mt.group(1) if mt else "/service/"
    for sec in DCS_SECTIONS:
        if re.search(rf"^{sec}:", text, re.M):
            addr = next((v for k in ("hosts", "host", "url", "proxy", "namespace",
                                     "self_addr") if (v := _key(text, sec, k))), "")
            return f"{sec}:{addr}{namespace}"
    return None


def _patronis(sr: SysRoot, procs: ProcTable) -> list[tuple[str, str]]:
    """(configuration file, its data_dir) of every Patroni running here. Patroni daemonizes
    the postmaster (its parent is PID 1), so the link is the data directory its
    configuration names (postgresql.data_dir)."""
    out = []
    for p in procs.all:
        argv = p.cmdline or ()
        if not any(a.rsplit("/", 1)[-1] == "patroni" for a in argv[:2]):
            continue
        config = next((a for a in argv[1:] if a.endswith((".yml", ".yaml"))), None)
        text = sr.read(config, quiet_missing=True) if config else None
        data_dir = _key(text or "", "postgresql", "data_dir")
        if data_dir:
            out.append((config, data_dir))
    return out


def manager_of(sr: SysRoot, procs: ProcTable, datadir: str | None, live: bool,
               timeout: float = 1.0) -> Manager | None:
    """The Patroni that runs the cluster in datadir, or None."""
    if not datadir:
        return None
    real = os.path.realpath(datadir)
    config = next((c for c, d in _patronis(sr, procs) if os.path.realpath(d) == real), None)
    if config is None:
        return None
    text = sr.read(config, quiet_missing=True) or ""
    listen = _key(text, "restapi", "listen")
    top = {k: (m.group(1) if (m := re.search(rf"^{k}:\s*['\"]?([^'\"\s#]+)", text, re.M))
               else None) for k in ("scope", "name")}  # the cluster's and the member's names
    scope, member, dcs = top["scope"], top["name"], _dcs(text)
    if not listen:
        return Manager("patroni", config, scope, member, dcs=dcs)
    host, _, port = listen.rpartition(":")
    host = "127.0.0.1" if host in ("", "0.0.0.0", "*") else host.strip("[]")
    api = f"http://{host}:{port}"
    if not live:  # a snapshot: the names from the configuration, nothing asked
        return Manager("patroni", config, scope, member, api=api, dcs=dcs)
    try:
        import urllib.request  # only where a Patroni runs (~15 ms to import)
        with urllib.request.urlopen(f"{api}/patroni", timeout=timeout) as r:
            d = json.loads(r.read().decode())
    except (OSError, ValueError):  # its API does not answer: nothing will go through it
        return Manager("patroni", config, scope, member, dcs=dcs)
    p = d.get("patroni") or {}
    # Patroni before 3.1 calls the primary "master" in its API
    role = {"master": "primary"}.get(d.get("role"), d.get("role"))
    local, custom = member_layers(text)
    try:
        with urllib.request.urlopen(f"{api}/config", timeout=timeout) as r:
            params = ((json.loads(r.read().decode()).get("postgresql") or {})
                      .get("parameters") or {})
        dynamic = tuple((k, str(params[k])) for k in LAYER_NAMES if params.get(k) is not None)
    except (OSError, ValueError, AttributeError):
        dynamic = None
    return Manager("patroni", config, p.get("scope") or scope, p.get("name") or member, role,
                   api, dcs, local, dynamic, custom)
