"""Where a running postmaster keeps its data and its configuration, as the postmaster itself
decided them, from what can be read without a connection (the connection's `SHOW
data_directory, config_file` overrides these afterwards: reported.query).

PostgreSQL decides them in SelectConfigFiles (src/backend/utils/misc/guc.c):
- the configuration directory is -D, else $PGDATA (no -D and no PGDATA is fine when
  config_file is given: `pg_ctlcluster --foreground` starts `postgres -c config_file=...`);
- the configuration file is `-c config_file`, else the configuration directory's
  postgresql.conf;
- the data directory is `data_directory` as the server's sources set it, where the command
  line (PGC_S_ARGV) outranks the file (PGC_S_FILE), else the configuration directory.
Then the postmaster chdirs into it (postmaster.c, ChangeToDataDir), so its working directory,
/proc/PID/cwd, is the data directory whatever the command line said: the kernel's word, used
to check the rest and where the rest cannot be read.
"""

from __future__ import annotations

import os
import posixpath

from hpadvise.api.face import Proc, SysRoot, Unknown, as_seen_inside, proc_root

from .conf import ConfError, read_conf

SUPPLY = "pass --dsn to connect to it, or run as root"
# a snapshot cannot be asked: what supplies the fact is a snapshot that kept it
SUPPLY_OFFLINE = ("take the snapshot as root with `hpadvise snapshot --with-environ` (it keeps "
                  "a server's environment and working directory)")


def _absolute(path: str | None) -> str | None:
    """An absolute path as given; a relative one is relative to the directory the
    postmaster was started in, which is gone once it chdirs: not usable."""
    return posixpath.normpath(path) if path and path.startswith("/") else None


def _cwd(fs: SysRoot, host: SysRoot, pm: Proc) -> str | None:
    """The postmaster's working directory as its own root names it (None where unreadable:
    another user's process, or a mount namespace whose paths the host does not share)."""
    link = host.readlink(f"/proc/{pm.pid}/cwd")
    if not link or link.endswith(" (deleted)"):
        return None
    return as_seen_inside(proc_root(fs), link)


def locate(fs: SysRoot, host: SysRoot, pm: Proc, given: dict[str, str], ddir: str | None,
           env: dict[str, str] | None) -> tuple[str | Unknown, str | None, str]:
    """(data directory or why it is unknown, configuration file or None, how it was found)
    for postmaster `pm`, whose arguments set `given` and -D `ddir`."""
    configdir = _absolute(ddir)
    how = "-D"
    if ddir is None and env and env.get("PGDATA"):
        configdir, how = _absolute(env["PGDATA"]), "PGDATA"
    conf = _absolute(given.get("config_file")) or (f"{configdir}/postgresql.conf"
                                                     if configdir else None)
    cwd = _cwd(fs, host, pm)
    datadir, why = None, ""
    if given.get("data_directory"):
        datadir, how = _absolute(given["data_directory"]), "-c data_directory"
    elif conf:
        try:
            line = read_conf(fs, conf).get("data_directory")
        except ConfError as exc:
            line, why = None, str(exc)
        if line:
            datadir, how = _absolute(line[0]), f"data_directory in {line[1]}"
        else:
            # the file sets none, or cannot be read here (not root): the configuration
            # directory, which is where the data is unless that file says otherwise
            datadir = configdir
    if cwd and (datadir is None or os.path.realpath(fs.path(datadir)) !=
                os.path.realpath(fs.path(cwd))):
        # the kernel's word over a reading that failed or disagrees (a relative -D)
        return cwd, conf, "its working directory"
    if datadir:
        return datadir, conf, how
    if not why:
        why = ("started with no -D, no config_file and no PGDATA that can be read"
               if env is not None else "its command line names no -D or config_file, and its "
               "environment is unreadable")
    return Unknown(f"the data directory of postmaster {pm.pid}",
                   f"{why}; its working directory is unreadable",
                   SUPPLY if host.live else SUPPLY_OFFLINE), conf, ""
