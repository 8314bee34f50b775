"""Where PostgreSQL clusters live when nobody names them: a stopped cluster still takes its
huge pages when it starts, so the plan must know it (plan: placement "kept")."""

from __future__ import annotations

import os
import re

from hpadvise.api.face import SysRoot


def debian_clusters(sr: SysRoot):
    """Debian's clusters: (version, name, postgresql.conf, data directory) for each
    /etc/postgresql/V/NAME/postgresql.conf whose data_directory points at the data
    (postgresql-common)."""
    for ver in sr.listdir("/etc/postgresql"):
        for name in sr.listdir(f"/etc/postgresql/{ver}"):
            conf = f"/etc/postgresql/{ver}/{name}/postgresql.conf"
            text = sr.read(conf, quiet_missing=True) or ""
            mt = re.search(r"^\s*data_directory\s*=?\s*'([^']+)'", text, re.M)
            if mt:
                yield ver, name, conf, mt.group(1)


def debian_conf(sr: SysRoot, datadir: str) -> str | None:
    """The Debian postgresql.conf whose data_directory is `datadir`, if any."""
    real = os.path.realpath(datadir)
    return next((conf for _, _, conf, d in debian_clusters(sr) if os.path.realpath(d) == real),
                None)


def found_datadirs(sr: SysRoot, remembered: tuple[str, ...]) -> list[tuple[str, str]]:
    """Data directories of clusters that may be stopped, and where each was found: those
    earlier applies changed (their journal), Debian's clusters (/etc/postgresql/V/NAME/
    postgresql.conf, its data_directory; postgresql-common) and the PGDG RHEL packages'
    default (/var/lib/pgsql/V/data)."""
    out = [(d, "an earlier apply's journal") for d in remembered]
    out += [(d, f"Debian's cluster {ver}/{name}") for ver, name, _, d in debian_clusters(sr)]
    for ver in sr.listdir("/var/lib/pgsql"):
        if sr.exists(f"/var/lib/pgsql/{ver}/data/PG_VERSION"):
            out.append((f"/var/lib/pgsql/{ver}/data", "the PGDG packages' layout"))
    return [(d, how) for d, how in out if sr.exists(f"{d}/PG_VERSION")]


def live_pidfile(sr: SysRoot, datadir: str) -> bool:
    """postmaster.pid names a live process: the cluster runs, seen or not (another PID
    namespace)."""
    text = sr.read(f"{datadir}/postmaster.pid", quiet_missing=True) or ""
    pid = text.split()[0] if text.split() else ""
    return pid.isdigit() and sr.exists(f"/proc/{pid}")
