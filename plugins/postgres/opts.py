"""The command line of a cluster's last start: postmaster.opts in its data directory.

- The postmaster writes it at every start (src/backend/postmaster/postmaster.c,
  CreateOptsFile): the path of its binary, then each argument in double quotes, as given
  (nothing escaped), on one line. `pg_ctl restart` reads it back (src/bin/pg_ctl/pg_ctl.c,
  read_post_opts): one line, the binary is what comes before the first ` "`, and the rest goes
  through the shell as the new server's options. So a cluster started with
  `pg_ctl -o "-c shared_buffers=1GB" start` takes 1 GB again when it is restarted that way.
- What those options set outranks the configuration files, as it did while the server ran
  (src/include/utils/guc.h, GucSource: PGC_S_FILE < PGC_S_ARGV), and among themselves the
  last one wins (each is a SetConfigOption at the same source).
- The options are postgres's own (PostmasterMain's getopt string
  "B:bC:c:D:d:EeFf:h:ijk:lN:OPp:r:S:sTt:W:-:"): `-c name=value` and `--name=value`
  (ParseLongOption: dashes in the name read as underscores), and the short options that set
  a parameter, below.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from hpadvise.api.face import Note, SysRoot

from .conf import GUC_UNIT_BYTES, INT_GUCS, ConfError, parse_int, parse_memory

# For the instance's settings' sources, and the layer that wins (layers.winning).
SOURCE = "the command line of its last start (postmaster.opts)"

# postmaster.c, PostmasterMain: the short options that set a parameter from their argument.
# -B is shared_buffers in its own unit (8 kB blocks) unless a unit is given: kept verbatim,
# as SetConfigOption takes it.
VALUED = {"B": "shared_buffers", "N": "max_connections", "p": "port", "h": "listen_addresses",
          "k": "unix_socket_directories", "S": "work_mem", "W": "post_auth_delay"}
# ... and those that set one without an argument.
FLAGS = {"E": ("log_statement", "all"), "e": ("datestyle", "euro"), "F": ("fsync", "false"),
         "i": ("listen_addresses", "*"), "l": ("ssl", "true"),
         "O": ("allow_system_table_mods", "true"), "P": ("ignore_system_indexes", "true"),
         "s": ("log_statement_stats", "true"), "T": ("send_abort_for_crash", "true")}
# Every option that takes an argument (a ':' after it in the getopt string).
TAKES_ARG = frozenset("BCcDdfhkNprStW-")


@dataclass(frozen=True)
class StartLine:
    """postmaster.opts as pg_ctl reads it: the binary, its arguments, and what they set."""
    binary: str
    args: tuple[str, ...]
    settings: dict[str, str] = field(default_factory=dict)  # name -> value, the last one wins
    datadir: str | None = None  # -D: the data directory, or the one holding postgresql.conf


def parse(text: str) -> StartLine | None:
    """One postmaster.opts; None when pg_ctl could not read it either (not one line, quotes
    that do not close)."""
    lines = text.splitlines()
    if len(lines) != 1 or not lines[0].strip():
        return None
    binary, quote, rest = lines[0].partition(' "')
    try:
        args = tuple(shlex.split(quote.lstrip() + rest)) if quote else ()
    except ValueError:
        return None
    settings, datadir = settings_of(args)
    return StartLine(binary.strip().strip('"'), args, settings, datadir)


def settings_of(args: tuple[str, ...] | list[str]) -> tuple[dict[str, str], str | None]:
    """What postgres's arguments set, as getopt(3) reads them (`-B 1000`, `-B1000`, `-Fi`),
    and the -D directory."""
    out: dict[str, str] = {}
    datadir = None
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a == "--":
            break
        if not a.startswith("-") or a == "-":
            continue  # not an option: the postmaster refuses it, so no start recorded it
        j = 1
        while j < len(a):
            opt = a[j]
            j += 1
            if opt in FLAGS:
                name, value = FLAGS[opt]
                out[name] = value
                continue
            if opt not in TAKES_ARG:
                continue
            if j < len(a):
                value = a[j:]
            elif i < len(args):
                value = args[i]
                i += 1
            else:
                break
            j = len(a)
            if opt in VALUED:
                out[VALUED[opt]] = value
            elif opt == "D":
                datadir = value
            elif opt in "c-":
                name, eq, v = value.partition("=")
                if eq:  # without a value the postmaster refuses to start
                    out[name.replace("-", "_").lower()] = v
    return out, datadir


def last_start(sr: SysRoot, datadir: str) -> StartLine | None:
    """The cluster's postmaster.opts, None where it has none (never started, or removed);
    one that cannot be read as pg_ctl would is a note, and counts as none."""
    path = f"{datadir}/postmaster.opts"
    text = sr.read(path, quiet_missing=True)
    if text is None:
        return None
    line = parse(text)
    if line is None:
        sr.notes.append(Note(path, f"not a command line: {text.strip()[:60]!r}"))
    return line


def take(c, line: StartLine | None) -> None:
    """Its last start's settings over those of the files (a Cluster whose files were read),
    checked as the files' are: a value its parameter would reject is the cluster's error."""
    if line is None:
        return
    for name, value in line.settings.items():
        c.settings[name] = value
        c.origins[name] = "command line"
        c.sources[name] = SOURCE
        if name in GUC_UNIT_BYTES:
            parse_memory(name, value, SOURCE)
        elif name in INT_GUCS:
            parse_int(name, value, SOURCE)
        elif name in ("huge_pages", "shared_memory_type"):
            c.settings[name] = value.lower()
            if name == "huge_pages" and c.settings[name] not in ("on", "off", "try"):
                raise ConfError(f"{SOURCE}: invalid value for huge_pages: {value!r}")
    c.argv_settings = dict(line.settings)
    if c.settings.get("port", "").isdigit():
        c.port = int(c.settings["port"])


def take_own(c, given: dict[str, str]) -> None:
    """A running postmaster's own command-line settings over those its files give (a Cluster
    whose files were read without a connection): as it took them (GucSource PGC_S_ARGV)."""
    for name, value in given.items():
        if name in ("config_file", "data_directory", "hba_file", "ident_file"):
            continue
        c.settings[name] = value.lower() if name in ("huge_pages", "shared_memory_type") \
            else value
        c.origins[name] = "command line"
        c.sources[name] = "command line"


def as_args(settings: dict[str, str], leave_out: tuple[str, ...] = ()) -> list[str]:
    """The settings as `-c name=value` arguments, for postgres -C to count with them."""
    return [x for k, v in settings.items() if k not in leave_out for x in ("-c", f"{k}={v}")]
