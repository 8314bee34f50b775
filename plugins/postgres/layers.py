"""Where a PostgreSQL setting really comes from, in the order that decides it, and whether
hpadvise changes it there.

A server takes each setting from the highest of these (PostgreSQL docs, 20.1.4 "Parameter
Interaction via the Shell" and 20.1.2 "Parameter Interaction via the Configuration File";
guc.h, GucSource: PGC_S_FILE < PGC_S_ARGV):

1. the postmaster's command line (`-c name=value`): what started it puts it there, pg_ctl's
   `-o`, Debian's pg_ctl.conf (`pg_ctl_options`), a service unit's ExecStart, or Patroni
   for the parameters it passes that way (max_connections, max_wal_senders ...);
2. postgresql.auto.conf, what ALTER SYSTEM writes;
3. postgresql.conf and the files it includes, the last occurrence winning;
4. the default.

A cluster Patroni runs gets its postgresql.conf from Patroni, which writes there its
dynamic configuration's postgresql.parameters (the cluster's, in the DCS), overridden by the
member's own configuration file's postgresql.parameters, on top of postgresql.base.conf or
postgresql.custom_conf (Patroni docs, "Dynamic Configuration Settings" and "YAML
Configuration Settings"; measured with Patroni 3.0.2: a member's own huge_pages: 'off' kept
it off whatever the cluster's configuration said). So for a member, layer 3 is split again:
its own file, then the cluster's configuration, then custom_conf or the base file.

hpadvise changes a setting where it takes: ALTER SYSTEM for a plain cluster (it outranks
every file), the cluster's dynamic configuration for a Patroni member. A command line, a
member's own file (configuration management writes it), custom_conf, and an ALTER SYSTEM on
a Patroni member are not hpadvise's to change: the plan says where and what to change
instead, and plans nothing that would not take. Debian's pg_ctl.conf is read for what it
will put on the command line at the next start too: options added there since the server
started win over any change in the files once pg_ctlcluster restarts it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpadvise.api.face import SysRoot

from .state import Cluster


@dataclass(frozen=True)
class Layer:
    where: str  # for people: the file and line, the key, the command line's origin
    changeable: bool  # hpadvise's change takes there (ALTER SYSTEM; Patroni's /config)
    how: str = ""  # where it is not: what to change where


def pg_ctl_conf(sr: SysRoot, c: Cluster, name: str) -> str | None:
    """Debian's pg_ctl.conf of this cluster where its pg_ctl_options set `name` (`-c name=`
    or `--name=` in the options pg_ctlcluster passes on at every start), else None."""
    mt = re.fullmatch(r"(/etc/postgresql/[^/]+/[^/]+)/postgresql\.conf", c.config_file or "")
    if not mt:
        return None
    text = sr.read(f"{mt.group(1)}/pg_ctl.conf", quiet_missing=True) or ""
    opts = re.search(r"^\s*pg_ctl_options\s*=\s*'(.*)'", text, re.M)
    if opts and re.search(rf"(-c\s*|--){re.escape(name)}\s*=", opts.group(1)):
        return f"{mt.group(1)}/pg_ctl.conf (pg_ctl_options)"
    return None


def command_line_origin(sr: SysRoot, c: Cluster, name: str) -> tuple[str, str]:
    """What put `-c name=...` on the postmaster's command line, and where to change it:
    Debian's pg_ctl.conf when its pg_ctl_options say so, else whatever started the server
    (postmaster.opts holds the command line of the last start)."""
    where = pg_ctl_conf(sr, c, name)
    if where:
        return where, f"change {name} in {where}"
    opts = f"{c.datadir}/postmaster.opts"
    return (f"the command line that started it ({opts})",
            f"change -c {name} where the server is started (its last command line: {opts})")


def winning(sr: SysRoot, c: Cluster, name: str) -> Layer:
    """The layer `name` takes its value from on this cluster (its server's word where it was
    asked: pg_settings' source, file and line; else the files read)."""
    m = c.manager
    src = c.sources.get(name) or ""
    origin = c.origins.get(name, "")
    if origin == "command line" or src.startswith("command line"):
        who, how = ("Patroni, which passes it to every member that way",
                    f"change {name} where Patroni sets it") if m is not None else \
            command_line_origin(sr, c, name)
        return Layer(f"the postmaster's command line ({who})", False, how + ", then restart")
    ctl = pg_ctl_conf(sr, c, name)
    if ctl:  # added since the server started: it wins at the next start
        return Layer(f"{ctl}, which pg_ctlcluster puts on the command line at the next start",
                     False, f"change {name} in {ctl}, or remove it there, then apply again")
    auto = "postgresql.auto.conf" in src or origin.split(":")[0].endswith(
        "postgresql.auto.conf")
    if auto and m is not None:
        return Layer(f"ALTER SYSTEM on this member ({src or origin})", False,
                     f"run ALTER SYSTEM RESET {name} on this member (it outranks Patroni's "
                     "configuration), then apply again")
    if m is None:
        return Layer(src or origin or "the default", True)
    local = dict(m.local)
    if name in local:
        return Layer(f"this member's own Patroni configuration {m.config} "
                     f"(postgresql.parameters.{name} = {local[name]})", False,
                     f"set postgresql.parameters.{name} in {m.config}, or remove it so that "
                     "the cluster's configuration applies; `patronictl reload` it, then "
                     "apply again")
    if m.dynamic is not None and name in dict(m.dynamic):
        return Layer(f"the cluster's dynamic configuration (Patroni /config, "
                     f"postgresql.parameters.{name})", True)
    return Layer((f"{m.custom_conf} (postgresql.custom_conf)" if m.custom_conf else
                  src or origin or "the default") + ", under the cluster's dynamic "
                 "configuration", True)
