"""What a running PostgreSQL server says of its settings over its connection: pg_settings
(value, unit, source, file and line, pending restart) and pg_file_settings (what the files
say now, and their errors), read into the cluster's state."""

from __future__ import annotations

from .conf import QUERY_GUCS, ConfError, parse_memory, with_unit
from .state import Cluster


def same(name: str, file_value: str | None, running: str | None) -> bool:
    """Whether a file's value is the one running (memory settings compared in bytes)."""
    if file_value is None or running is None:
        return False
    if file_value == running:
        return True
    try:
        return parse_memory(name, file_value) == parse_memory(name, running)
    except ConfError:
        return False


def source_of(source: str | None, sfile: str | None = None, sline: str | None = None) -> str:
    """Where a setting comes from, in words: pg_settings' source, with the file and line
    where it shows them (superusers and pg_read_all_settings; "Viewing Settings",
    pg_settings); postgresql.auto.conf is what ALTER SYSTEM writes."""
    if source == "configuration file" or (source is None and sfile):
        where = f"{sfile}:{sline}" if sfile else "a configuration file"
        return f"ALTER SYSTEM ({where})" if (sfile or "").endswith("postgresql.auto.conf") \
            else where
    return {"override": "set by the server itself", "environment variable": "environment",
            None: "unknown"}.get(source, source or "unknown")


def query(conn, c: Cluster) -> None:
    """Read a running cluster's settings over its connection into `c`: pg_settings with each
    setting's source, pending restarts, the configuration files' errors."""
    names = "{" + ",".join(QUERY_GUCS) + "}"  # a text[] literal of plain GUC names
    rows = conn.execute(
        "SELECT name, setting, unit, pending_restart, source, sourcefile, sourceline, "
        "boot_val FROM pg_settings WHERE name = ANY($1::text[])", (names,))
    flagged = {}  # the server's pending_restart: name -> (running, built-in default)
    argv = set()  # set on the postmaster's command line (Patroni sets several there)
    for name, setting, unit, pend, source, sfile, sline, boot in rows:
        c.settings[name] = with_unit(setting, unit)
        c.origins[name] = "command line" if source == "command line" else "server"
        c.sources[name] = source_of(source, sfile, sline)
        if source in ("command line", "override"):
            argv.add(name)
        elif pend == "t":
            flagged[name] = (setting, boot)
    pending = list(flagged)
    try:
        # pending_restart flips only at a reload; pg_file_settings re-reads the files now,
        # so an ALTER SYSTEM not yet reloaded shows too ("applied" false = needs restart).
        # Earlier lines overridden by later ones are "not applied" too: last one per name.
        # A file line under a command-line value is "not applied" for ever: the command
        # line outranks the files (GucSource order, guc.h: PGC_S_FILE < PGC_S_ARGV), so it
        # is no pending change; nor is one whose value is the running one.
        rows = list(conn.execute(
            "SELECT DISTINCT ON (name) name, setting, applied, error FROM pg_file_settings "
            "WHERE name = ANY($1::text[]) ORDER BY name, seqno DESC", (names,)))
        # A line removed from the files flags pending_restart too, even where the
        # built-in default it falls back to is the running value (guc.c,
        # ProcessConfigFileInternal: "the removal can't be effective without a
        # restart"); a restart changes nothing then, so it is no pending change.
        in_files = {r[0] for r in rows}
        pending = [n for n in pending if n in in_files or flagged[n][0] != flagged[n][1]]
        # A postmaster-context change reads "setting could not be applied" (guc-file.l).
        pending += [n for n, value, applied, err in rows
                    if applied != "t" and n not in pending and n not in argv
                    and err in (None, "setting could not be applied")
                    and not same(n, value, c.settings.get(n))]
        c.file_errors = tuple(
            (f"{f}:{ln}: {err}" if f and ln else f"{f or 'a file'}: {err}") for f, ln, err in conn.execute(
                "SELECT sourcefile, sourceline, error FROM pg_file_settings "
                "WHERE error IS NOT NULL ORDER BY seqno"))
    except Exception:
        pass  # needs superuser or pg_read_all_settings
    c.pending_restart = tuple(pending)
    c.connected_as = conn.user
    if c.settings.get("data_directory"):
        c.datadir = c.settings["data_directory"]
    if c.settings.get("port", "").isdigit():
        c.port = int(c.settings["port"])
    vnum = c.settings.get("server_version_num", "")
    if vnum.isdigit():
        c.major = int(vnum) // 10000
