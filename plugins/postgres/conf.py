"""PostgreSQL configuration: the postgresql.conf grammar with includes, memory units, the
defaults sizing falls back on, and where Debian keeps the files."""

from __future__ import annotations

import os
import re

from hpadvise.api.face import InputError, SysRoot, redact_text

DOCS = "PostgreSQL docs, 19.4.5 Linux Huge Pages"
BLCKSZ = 8192  # default block size; the real one is read from block_size when connected

# GUCs whose change alters the shared memory size (and so the page count) after a restart.
SHMEM_GUCS = ("shared_buffers", "max_connections", "huge_page_size", "wal_buffers",
              "max_worker_processes", "max_wal_senders", "autovacuum_max_workers",
              "max_locks_per_transaction", "max_prepared_transactions",
              "min_dynamic_shared_memory", "max_pred_locks_per_transaction",
              "autovacuum_worker_slots")  # 18+: the autovacuum workers' slots (sizing.py)

QUERY_GUCS = SHMEM_GUCS + (
    "huge_pages", "shared_memory_size", "shared_memory_size_in_huge_pages", "shared_memory_type",
    "data_directory", "config_file", "port", "server_version", "server_version_num",
    "block_size", "wal_block_size", "unix_socket_directories",
    "huge_pages_status")  # PostgreSQL 17+; the query simply has no row for it before

# PostgreSQL memory units are case-sensitive (src/backend/utils/misc/guc.c, memory_unit_conversion_table).
PG_UNITS = {"B": 1, "kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
# Default unit of the memory GUCs hpadvise reads (the "unit" column of pg_settings).
GUC_UNIT_BYTES = {"shared_buffers": BLCKSZ, "wal_buffers": BLCKSZ, "huge_page_size": 1 << 10,
                  "min_dynamic_shared_memory": 1 << 20}
# The integer settings sizing reads: checked where they are read, with the file and line.
INT_GUCS = ("max_connections", "max_worker_processes", "max_wal_senders",
            "autovacuum_max_workers", "max_locks_per_transaction", "max_prepared_transactions",
            "autovacuum_worker_slots")
# Defaults of PostgreSQL 15 (postgresql.conf.sample), used when a stopped cluster's config
# does not set them.
DEFAULTS = {"shared_buffers": "128MB", "max_connections": "100", "huge_pages": "try",
            "huge_page_size": "0", "wal_buffers": "-1", "max_worker_processes": "8",
            "max_wal_senders": "10", "autovacuum_max_workers": "3",
            "max_locks_per_transaction": "64", "max_prepared_transactions": "0",
            "shared_memory_type": "mmap", "port": "5432", "min_dynamic_shared_memory": "0"}



class ConfError(InputError):
    pass


class ConfUnreadable(ConfError):
    """Permission denied: a limit of who runs hpadvise, not bad input."""


_TOKEN = re.compile(r"""\s*(?P<name>[A-Za-z_][\w.]*)\s*=?\s*(?P<value>'(?:[^'\\]|''|\\.)*'|[^\s#']+)?\s*(?:#.*)?$""")


def _unquote(v: str) -> str:
    if v.startswith("'") and v.endswith("'") and len(v) >= 2:
        return re.sub(r"''|\\(.)", lambda m: "'" if m.group(0) == "''" else m.group(1), v[1:-1])
    return v


def read_conf(sr: SysRoot, path: str, out: dict[str, tuple[str, str]] | None = None,
              depth: int = 0) -> dict[str, tuple[str, str]]:
    """Settings of a postgresql.conf and everything it includes, later lines winning, as
    {name: (value, "file:line")}. Grammar: src/backend/utils/misc/guc-file.l; includes and
    the depth limit of 10: CONF_FILE_MAX_DEPTH in guc.h."""
    out = {} if out is None else out
    if depth > 10:
        raise ConfError(f"{path}: includes nested more than 10 deep (an include loop?)")
    text = sr.read(path)
    if text is None:
        reason = sr.notes[-1].reason if sr.notes else "unreadable"
        cls = ConfUnreadable if "permission denied" in reason else ConfError
        raise cls(f"cannot read {path}: {reason}")
    return parse_conf(text, path, out, sr, depth)


def parse_conf(text: str, path: str, out: dict[str, tuple[str, str]] | None = None,
               sr: SysRoot | None = None, depth: int = 0) -> dict[str, tuple[str, str]]:
    """The settings in one file's text; includes are followed through `sr` (without one, as
    for postgresql.auto.conf, which has none, they are an error)."""
    out = {} if out is None else out
    here = os.path.dirname(path)
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        mt = _TOKEN.match(line)
        if not mt or mt.group("value") is None:
            shown = redact_text(line.strip())[:60]
            raise ConfError(f"{path}:{n}: syntax error in {shown!r}; "
                            "expected name = value")
        name, value = mt.group("name").lower(), _unquote(mt.group("value"))
        if name in ("include", "include_if_exists", "include_dir"):
            if sr is None:
                raise ConfError(f"{path}:{n}: {name} is not expected in this file")
            target = value if os.path.isabs(value) else os.path.join(here, value)
            if name == "include_dir":
                for f in sr.listdir(target, quiet_missing=False):
                    if f.endswith(".conf") and not f.startswith("."):
                        read_conf(sr, f"{target}/{f}", out, depth + 1)
            elif name == "include" or sr.exists(target):
                read_conf(sr, target, out, depth + 1)
            continue
        out[name] = (value, f"{path}:{n}")
    return out


def parse_memory(name: str, value: str, where: str = "") -> int:
    """A memory GUC value in bytes. PostgreSQL's rules: an integer in the GUC's own unit, or a
    number followed by one of B, kB, MB, GB, TB (case-sensitive)."""
    mt = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", value)
    if not mt or (mt.group(2) and mt.group(2) not in PG_UNITS):
        raise ConfError(f"{where + ': ' if where else ''}invalid value for {name}: {value!r}; "
                        'valid units are "B", "kB", "MB", "GB" and "TB" (case-sensitive)')
    unit = PG_UNITS[mt.group(2)] if mt.group(2) else GUC_UNIT_BYTES.get(name, 1)
    return int(float(mt.group(1)) * unit)


def parse_int(name: str, value: str, where: str = "") -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfError(f"{where + ': ' if where else ''}invalid value for {name}: {value!r}; "
                        "expected an integer") from None



def with_unit(setting: str, unit: str | None) -> str:
    """pg_settings gives '16384' with unit '8kB': turn it into bytes with a PG unit."""
    if not unit or not setting.lstrip("-").isdigit():
        return setting
    mt = re.fullmatch(r"(\d*)(B|kB|MB|GB|TB)", unit)
    if not mt:
        return setting
    n = int(setting) * (int(mt.group(1)) if mt.group(1) else 1)
    if n < 0:
        return setting
    return f"{n}{mt.group(2)}"
