"""Where a MySQL/MariaDB option really comes from, in the order that decides it, and whether
hpadvise changes it there.

From the highest (MySQL Reference Manual, 6.2.2.2 "Using Option Files" and 5.1.9.3
"Persisted System Variables"; MariaDB docs, "Configuring MariaDB with Option Files"):

1. SET PERSIST / PERSIST_ONLY (MySQL 8.0 and later): mysqld-auto.cnf in the data directory,
   read after every option file and the command line;
2. the server's command line (`--large-pages`, `--skip-large-pages`, `--large-pages=OFF`):
   what starts it puts it there (a service unit, mysqld_safe's arguments);
3. the option files in the order the server reads them, `!include` and `!includedir` where
   they stand, the last occurrence in a group the server reads winning;
4. the default.

hpadvise changes an option in the file whose line wins (so that its change wins too), or, where
no file sets it, in a drop-in of the last include directory or the last file with a server
group. A command line and a persisted setting are not hpadvise's to change: the plan says where
and what to change, and plans nothing that would not take.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from hpadvise.api.face import SysRoot

from .conf import OptionFiles, cmdline_settings, default_files, read_option_file

# The groups any MySQL or MariaDB server reads, unversioned (conf.SERVER_GROUP), for reading
# back what the files say after a change.
ANY_SERVER = ("mysqld", "server", "client-server", "mariadb", "mariadbd")


@dataclass(frozen=True)
class Layer:
    where: str
    changeable: bool
    how: str = ""
    file: str | None = None  # the option file whose line wins, where one does


def persisted(sr: SysRoot, datadir: str | None, name: str) -> str | None:
    """The value SET PERSIST or PERSIST_ONLY left for `name` in mysqld-auto.cnf (a JSON file:
    the variable's name under any of its sections, with a "Value"), or None."""
    text = sr.read(os.path.join(datadir, "mysqld-auto.cnf"), quiet_missing=True) \
        if datadir else None
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return None
    stack = [data]
    while stack:
        d = stack.pop()
        if isinstance(d, dict):
            v = d.get(name)
            if isinstance(v, dict) and "Value" in v:
                return str(v["Value"])
            stack.extend(d.values())
    return None


def winning(sr: SysRoot, argv: tuple[str, ...], datadir: str | None, options: OptionFiles,
            name: str) -> Layer:
    """The layer `name` takes its value from at the server's next start."""
    p = persisted(sr, datadir, name)
    if p is not None:
        auto = os.path.join(datadir or "", "mysqld-auto.cnf")
        return Layer(f"SET PERSIST ({auto}: {name} = {p})", False,
                     f"RESET PERSIST {name} (or SET PERSIST_ONLY {name} = ON), then apply "
                     "again")
    cl = cmdline_settings(argv)
    if name in cl:
        return Layer(f"the server's command line ({name} = {cl[name][0]})", False,
                     f"change --{name.replace('_', '-')} where the server is started (its "
                     "service unit or mysqld_safe's arguments), then restart")
    if name in options.settings:
        value, where = options.settings[name]
        return Layer(f"{where} ({name} = {value})", True, file=where.rsplit(":", 1)[0])
    return Layer("the default", True)


def effective(argv: tuple[str, ...] | list[str], datadir: str | None, name: str,
              edited: str, root: dict | None = None) -> tuple[str | None, str] | None:
    """What the server would take for `name` at its next start, reading every option file
    again as it does (in its own root, `root` as journaled, where it has one), and where
    from: (value, layer) or (None, "the default"). None when the file `edited` (a host path)
    is not among those it reads (nothing to judge it by)."""
    from hpadvise.api.face import view_of_spec
    sr = view_of_spec(root)
    files, extra = default_files(tuple(argv), None)
    of = OptionFiles()
    for f in files + extra:
        read_option_file(sr, f, ANY_SERVER, of)
    if os.path.realpath(edited) not in {os.path.realpath(sr.path(f)) for f in of.files}:
        return None
    lay = winning(sr, tuple(argv), datadir, of, name)
    if lay.file is not None:
        return of.settings[name][0], lay.where
    p = persisted(sr, datadir, name)
    if p is not None:
        return p, lay.where
    cl = cmdline_settings(tuple(argv))
    return (cl[name][0], lay.where) if name in cl else (None, lay.where)
