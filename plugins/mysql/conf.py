"""MySQL/MariaDB option files: the groups a server reads, the files and include directories in
the order the server reads them, option names and size suffixes, and the command line."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from hpadvise.api.face import InputError, SysRoot, redact_text



DOCS = "MariaDB docs, large_pages; MySQL manual, Enabling Large Page Support"
MiB = 1 << 20

# Server defaults (MariaDB 10.11 / MySQL 8 system variable tables) for what sizing reads.
DEFAULTS = {"innodb_buffer_pool_size": "128M", "innodb_log_buffer_size": "16M",
            "key_buffer_size": "128M", "key_cache_segments": "0", "key_cache_block_size": "1024",
            "key_cache_file_hash_size": "512", "aria_pagecache_buffer_size": "128M",
            "aria_block_size": "8192", "aria_pagecache_file_hash_size": "512",
            "large_pages": "OFF", "innodb_buffer_pool_chunk_size": "128M",
            "innodb_buffer_pool_instances": "1", "innodb_page_size": "16384",
            "innodb": "ON", "innodb_log_file_mmap": "OFF"}
# Where MySQL's default differs from MariaDB's (MySQL 8.0/8.4 manual, key_buffer_size 8 MiB).
FLAVOUR_DEFAULTS = {"mysql": {"key_buffer_size": "8M"}}
SIZE_VARS = ("innodb_buffer_pool_size", "innodb_buffer_pool_size_max", "innodb_log_buffer_size",
             "key_buffer_size", "aria_pagecache_buffer_size", "innodb_buffer_pool_chunk_size",
             "key_cache_block_size", "aria_block_size", "innodb_page_size")
QUERY_VARS = tuple(DEFAULTS) + ("innodb_buffer_pool_size_max", "innodb_use_native_aio",
                                "version", "datadir", "port",
                                "socket", "log_error", "pid_file", "skip_networking",
                                "large_page_size", "version_comment")
# Lines in the error log that mean a large-page allocation failed (mysys/my_largepage.c;
# MySQL: storage/innobase/include/detail/ut/large_page_alloc-linux.h "large_page_aligned_alloc
# mmap(...) failed", older releases storage/innobase/os/os0proc.cc "Failed to allocate N bytes"
# then "Using conventional memory pool").
FALLBACK_RE = re.compile(r"Couldn't allocate \d+ bytes \(Large/HugeTLB memory page size \d+\)"
                         r"|continuing to smaller size|large_page_aligned_alloc mmap\(.*\) failed"
                         r"|Using conventional memory pool|Failed to allocate \d+ bytes"
                         r"|shmget\(.*\) failed", re.I)


class OptionFileError(InputError):
    """A malformed option file, an include loop: one line naming the file and line."""


def norm(name: str) -> str:
    """Option names: dashes and underscores are the same (mysys/my_getopt.c)."""
    return name.strip().replace("-", "_").lower()


def parse_size(name: str, value: str, where: str = "") -> int:
    """A numeric option with an optional K/M/G/T/P/E suffix, powers of 1024
    (mysys/my_getopt.c eval_num_suffix)."""
    mt = re.fullmatch(r"\s*(\d+)\s*([kmgtpe]?)\s*", str(value), re.I)
    if not mt:
        raise OptionFileError(f"{where or name}: {name} = {value!r} is not a size; write it "
                              "like 2G or 512M")
    return int(mt.group(1)) << (10 * " kmgtpe".index(mt.group(2).lower() or " "))


# Any group a MySQL or MariaDB server reads, whatever its version (server_groups lists them
# for one flavour and version): where apply may look for and change its options.
SERVER_GROUP = re.compile(r"(mysqld|server|client-server|mariadb|mariadbd)(-\d+\.\d+)?")


def server_groups(flavour: str, version: tuple[int, ...] | None) -> tuple[str, ...]:
    """Option groups the server reads (MariaDB docs, Configuring MariaDB with Option Files:
    [client-server], [server], [mysqld], [mysqld-X.Y], [mariadb], [mariadb-X.Y], [mariadbd],
    [mariadbd-X.Y]; MySQL: [mysqld], [server], [mysqld-X.Y])."""
    g = ["mysqld", "server"]
    xy = f"{version[0]}.{version[1]}" if version and len(version) >= 2 else None
    if xy:
        g.append(f"mysqld-{xy}")
    if flavour == "mariadb":
        g += ["client-server", "mariadb", "mariadbd"]
        if xy:
            g += [f"mariadb-{xy}", f"mariadbd-{xy}"]
    return tuple(g)


@dataclass
class OptionFiles:
    """What a server's option files say: settings with their origin, files read, and include
    directories (where a drop-in goes)."""
    settings: dict[str, tuple[str, str]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    includedirs: list[str] = field(default_factory=list)
    group_files: list[str] = field(default_factory=list)  # files with one of our groups
    versioned: bool = False  # has [mysqld-X.Y]-style groups: the version decides what applies


def read_option_file(sr: SysRoot, path: str, groups: tuple[str, ...], out: OptionFiles,
                     stack: tuple[str, ...] = ()) -> None:
    """One option file and what it includes (mysys/my_default.c search_default_file_with_ext):
    `[group]` headers, `name[=value]` lines, `#`/`;` comments, `!include FILE`,
    `!includedir DIR` (files ending .cnf, in name order)."""
    real = os.path.realpath(sr.path(path))
    if real in stack:
        chain = " -> ".join([*stack, real])
        raise OptionFileError(f"{path}: include loop ({chain}); remove one of the !include lines")
    text = sr.read(path, quiet_missing=True)
    if text is None:
        if stack:
            raise OptionFileError(f"{stack[-1]}: included file {path} cannot be read; fix the "
                                  "!include line or the file's permissions")
        return
    out.files.append(path)
    group = None
    for n, raw in enumerate(text.splitlines(), 1):
        where = f"{path}:{n}"
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("!"):
            mt = re.fullmatch(r"!(include|includedir)\s+(\S.*)", line)
            if not mt:
                raise OptionFileError(f"{where}: {redact_text(line)!r} is not an include "
                                      "directive; write !include FILE or !includedir DIR")
            target = mt.group(2).strip()
            if mt.group(1) == "include":
                read_option_file(sr, target, groups, out, (*stack, real))
            else:
                out.includedirs.append(target)
                for name in sorted(sr.listdir(target)):
                    if name.endswith(".cnf"):
                        read_option_file(sr, f"{target.rstrip('/')}/{name}", groups, out,
                                         (*stack, real))
            continue
        if line.startswith("["):
            mt = re.fullmatch(r"\[\s*([^\]\s]+)\s*\]\s*(?:[#;].*)?", line)
            if not mt:
                raise OptionFileError(f"{where}: wrong group definition "
                                      f"{redact_text(line)!r}; write it like [mysqld]")
            group = mt.group(1).lower()
            if group in groups and path not in out.group_files:
                out.group_files.append(path)
            if re.search(r"-\d+\.\d+$", group):
                out.versioned = True
            continue
        if group is None:
            raise OptionFileError(f"{where}: option {redact_text(line)!r} before any [group]; "
                                  "put it under [mysqld]")
        if group not in groups:
            continue
        name, eq, value = line.partition("=")
        if not re.fullmatch(r"\s*[A-Za-z][\w\-.]*\s*", name):
            raise OptionFileError(f"{where}: cannot read {redact_text(line)!r}; write "
                                  "name = value")
        value = strip_value(value) if eq else "ON"  # a bare option switches it on
        key = norm(name)
        for prefix in ("loose_", "enable_"):
            if key.startswith(prefix):
                key = key[len(prefix):]
        if key.startswith(("skip_", "disable_")):
            key, value = key.split("_", 1)[1], "OFF"
        if key.startswith("maximum_"):
            continue
        out.settings[key] = (value, where)


def strip_value(value: str) -> str:
    v = value.strip()
    if v and v[0] in "'\"":
        q = v[0]
        end = v.find(q, 1)
        return v[1:end] if end > 0 else v[1:]
    return re.split(r"\s+#", v, maxsplit=1)[0].strip()


def default_files(argv: tuple[str, ...], home: str | None) -> tuple[list[str], list[str]]:
    """The option files a server reads, from its command line (--no-defaults,
    --defaults-file, --defaults-extra-file must come first; mysys/my_default.c) and the
    default search list for Linux (MariaDB docs, Default Option File Locations)."""
    extra: list[str] = []
    files = ["/etc/my.cnf", "/etc/mysql/my.cnf"]
    for a in argv[1:4]:
        if a == "--no-defaults":
            return [], []
        if a.startswith("--defaults-file="):
            files = [a.split("=", 1)[1]]
        elif a.startswith("--defaults-extra-file="):
            extra.append(a.split("=", 1)[1])
    if len(files) == 2 and home:
        files.append(f"{home}/.my.cnf")
    return files, extra


def cmdline_settings(argv: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """--name=value / --name / --skip-name options on the server's command line (they win
    over option files)."""
    out = {}
    for a in argv[1:]:
        if not a.startswith("--") or a.startswith(("--defaults", "--no-defaults")):
            continue
        name, eq, value = a[2:].partition("=")
        key = norm(name)
        if key.startswith("loose_"):
            key = key[6:]
        if key.startswith(("skip_", "disable_")):
            key, value = key.split("_", 1)[1], "OFF"
        elif not eq:
            value = "ON"
        out[key] = (value, "command line")
    return out


