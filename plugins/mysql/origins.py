"""Where each of a server's shown settings came from, for people: the server's own word where it
keeps one (MySQL 8.0 and later: performance_schema.variables_info, MySQL Reference Manual,
29.12.14.2 "Performance Schema variables_info Table"), else the layer that decides it at the
next start (layers.winning: SET PERSIST's file, the command line, the option files)."""

from __future__ import annotations

from hpadvise.api.face import SysRoot

from .layers import winning

SHOWN = ("innodb_buffer_pool_size", "large_pages", "innodb_log_buffer_size", "key_buffer_size",
         "aria_pagecache_buffer_size")

# variables_info.VARIABLE_SOURCE: the enum_variable_source of sql/set_var.h. The option files
# (GLOBAL, SERVER, EXPLICIT, EXTRA, USER, LOGIN) are named by VARIABLE_PATH instead.
_WORDS = {"COMPILED": "the default", "COMMAND_LINE": "the server's command line",
          "DYNAMIC": "SET GLOBAL (until the server restarts)"}


def from_server(conn, names: tuple[str, ...] = SHOWN) -> dict[str, str]:
    """The server's own account of where each setting came from; {} where it keeps none
    (MariaDB, MySQL before 8.0, a user without access to performance_schema)."""
    try:
        rows = conn.execute(
            "SELECT VARIABLE_NAME, VARIABLE_SOURCE, VARIABLE_PATH FROM "
            "performance_schema.variables_info WHERE VARIABLE_NAME IN ("
            + ", ".join(f"'{n}'" for n in names) + ")")
    except Exception:
        return {}
    out = {}
    for name, source, path in rows:
        source = str(source or "").upper()
        if source == "PERSISTED":
            out[str(name).lower()] = f"SET PERSIST ({path})" if path else "SET PERSIST"
        elif source in _WORDS:
            out[str(name).lower()] = _WORDS[source]
        elif path:
            out[str(name).lower()] = str(path)
    return out


def sources(sr: SysRoot, s, shown: dict) -> dict[str, str]:
    """name -> where it comes from, for each shown setting: the layer that wins at the next
    start for the setting the plan changes (what apply would have to outrank), the server's
    word for the others, the layers where it gave none."""
    out = {}
    for name in SHOWN:
        if name not in shown:
            continue
        if name in s.layers:
            out[name] = s.layers[name].where
            continue
        lay = winning(sr, s.argv, s.datadir, s.options, name) if s.options is not None \
            else None
        said = s.sources.get(name)
        # SET PERSIST sets the running value too, which the server then calls DYNAMIC: the
        # persisted file is what lasts
        if said and not (said.startswith("SET GLOBAL") and lay is not None
                         and lay.where.startswith("SET PERSIST")):
            out[name] = said
        elif lay is not None:
            out[name] = lay.where
    return out
