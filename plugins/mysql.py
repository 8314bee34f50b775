"""MySQL and MariaDB: discover servers, count the huge pages their large-page allocations need,
and catch the silent fallback to normal pages.

Facts this module relies on (cited where used):
- With large_pages=ON the server allocates a few big buffers with my_large_malloc()
  (mysys/my_largepage.c): an mmap(MAP_HUGETLB) per buffer on MariaDB >= 10.5 and MySQL 8, each
  rounded up to the huge page size; smaps shows them as private "/anon_hugepage (deleted)".
  A buffer smaller than the huge page stays on normal pages. When a mapping fails it logs
  "Couldn't allocate N bytes (Large/HugeTLB memory page size P); errno 12; continuing to smaller
  size" and carries on with 4 KiB pages: the fallback is silent unless someone reads the log.
- Which buffers (measured on MariaDB 10.11.19 here, hpadvise REFERENCE.md; sources named):
  the InnoDB buffer pool (storage/innobase/buf/buf0buf.cc), two InnoDB log buffers of
  innodb_log_buffer_size each (log_sys.buf and flush_buf, storage/innobase/log/log0log.cc,
  MariaDB >= 10.8), the MyISAM key cache's block area (mysys/mf_keycache.c,
  init_simple_key_cache, one per segment) and the Aria page cache's block area
  (storage/maria/ma_pagecache.c, init_pagecache).
- MariaDB >= 10.6.17 switches THP off for itself (prctl PR_SET_THP_DISABLE, MDEV-33279):
  /proc/PID/status then reads "THP_enabled: 0".
- MySQL < 8.0 and MariaDB < 10.5 used SysV shared memory (shmget SHM_HUGETLB) for large pages,
  which needs RLIMIT_MEMLOCK and vm.hugetlb_shm_group (MySQL 5.7 manual, 8.12.3.3 Enabling
  Large Page Support); later versions use mmap and need neither (measured: ulimit -l 0 works).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from hpadvise.actions import Action, ActionError, File, Restart, ServerSetting
from hpadvise.engines import Change, Demand, Engine, Finding, Instance, Targets, redact_dsn
from hpadvise.errors import InputError
from hpadvise.host import HostFacts
from hpadvise.procs import Mapping, Proc, ProcTable, proc_state, systemd_unit
from hpadvise.profiles import Profile
from hpadvise.sizing import fmt_bytes, fmt_page, pages_for
from hpadvise.sysroot import SysRoot

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
SIZE_VARS = ("innodb_buffer_pool_size", "innodb_buffer_pool_size_max", "innodb_log_buffer_size",
             "key_buffer_size", "aria_pagecache_buffer_size", "innodb_buffer_pool_chunk_size",
             "key_cache_block_size", "aria_block_size", "innodb_page_size")
QUERY_VARS = tuple(DEFAULTS) + ("innodb_buffer_pool_size_max", "innodb_use_native_aio",
                                "version", "datadir", "port",
                                "socket", "log_error", "pid_file", "skip_networking",
                                "large_page_size", "version_comment")
# Lines in the error log that mean a large-page allocation failed (mysys/my_largepage.c;
# MySQL 8: storage/innobase/os/os0proc.cc "large_page_aligned_alloc mmap(...) failed").
FALLBACK_RE = re.compile(r"Couldn't allocate \d+ bytes \(Large/HugeTLB memory page size \d+\)"
                         r"|continuing to smaller size|large_page_aligned_alloc mmap\(.*\) failed"
                         r"|Warning: Using conventional memory pool|shmget\(.*\) failed", re.I)

# Struct sizes on LP64 from the definitions in mysys/mf_keycache.c (st_block_link: 5 pointers,
# 2 wait queues, requests, buffer, 5 ints, last_hit_time, condvar = 112 B; st_hash_link: 3
# pointers, file, diskpos, requests = 48 B) and storage/maria/ma_pagecache.c
# (st_pagecache_block_link 144 B; st_pagecache_hash_link with its PAGECACHE_FILE 112 B).
KEYCACHE_STRUCTS = (112, 48)
AIO_ALLOWANCE = 6 * MiB
PAGECACHE_STRUCTS = (144, 112)


class OptionFileError(InputError):
    """A malformed option file, an include loop: one line naming the file and line."""


# --------------------------------------------------------------------------- option files

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


def server_greets(sock: str | None) -> bool:
    """A MySQL/MariaDB server accepts connections on `sock`: it sends its handshake first."""
    if not sock or not os.path.exists(sock):
        return False
    import socket as so
    try:
        with so.socket(so.AF_UNIX) as c:
            c.settimeout(1)
            c.connect(sock)
            return bool(c.recv(1))
    except OSError:
        return False


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
                raise OptionFileError(f"{where}: {line!r} is not an include directive; write "
                                      "!include FILE or !includedir DIR")
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
                raise OptionFileError(f"{where}: wrong group definition {line!r}; write it "
                                      "like [mysqld]")
            group = mt.group(1).lower()
            if group in groups and path not in out.group_files:
                out.group_files.append(path)
            if re.search(r"-\d+\.\d+$", group):
                out.versioned = True
            continue
        if group is None:
            raise OptionFileError(f"{where}: option {line!r} before any [group]; put it "
                                  "under [mysqld]")
        if group not in groups:
            continue
        name, eq, value = line.partition("=")
        if not re.fullmatch(r"\s*[A-Za-z][\w\-.]*\s*", name):
            raise OptionFileError(f"{where}: cannot read {line!r}; write name = value")
        value = _strip_value(value) if eq else "ON"  # a bare option switches it on
        key = norm(name)
        for prefix in ("loose_", "enable_"):
            if key.startswith(prefix):
                key = key[len(prefix):]
        if key.startswith(("skip_", "disable_")):
            key, value = key.split("_", 1)[1], "OFF"
        if key.startswith("maximum_"):
            continue
        out.settings[key] = (value, where)


def _strip_value(value: str) -> str:
    v = value.strip()
    if v[:1] in "'\"":
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


# --------------------------------------------------------------------------- sizing

def _cache_blocks(use_mem: int, block: int, structs: tuple[int, int], hash_size: int) -> int:
    """Blocks a MyISAM key cache or Aria page cache makes of `use_mem`: the formula and the
    shrinking loop of init_simple_key_cache() (mysys/mf_keycache.c) and init_pagecache()
    (storage/maria/ma_pagecache.c): per block a block link, two hash links, 5/4 of a hash
    bucket and the page; hash buckets are the next power of two above 2x blocks."""
    blink, hlink = structs
    blocks = use_mem // (blink + 2 * hlink + 8 * 5 // 4 + block)
    if blocks < 8:
        return 0
    entries = 1 << (blocks - 1).bit_length() << 1
    if entries < blocks * 5 // 4:
        entries <<= 1
    fixed = 8 * entries + 8 * hash_size * 2
    per = blink + 2 * hlink + block
    if fixed + per * blocks > use_mem:
        blocks = max(8, (use_mem - fixed) // per)
    return blocks


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    mt = re.match(r"(\d+)\.(\d+)\.(\d+)", text or "")
    return tuple(int(x) for x in mt.groups()) if mt else None


def single_allocation_pool(flavour: str, v: tuple[int, ...] | None) -> bool:
    """MariaDB's reworked buffer pool (MDEV-29445: one reservation, innodb_buffer_pool_size_max,
    chunk size ignored) shipped in 10.11.12, 11.4.6, 11.8.2 and 12.0."""
    if flavour != "mariadb" or not v:
        return False
    return v >= (12, 0) or (10, 11, 12) <= v < (10, 12) or (11, 4, 6) <= v < (11, 5) \
        or (11, 8, 2) <= v < (11, 9)


@dataclass
class Allocation:
    what: str
    bytes: int
    exact: bool
    source: str
    allowance: bool = False  # not always mapped: counted so that it never takes others' pages


def allocations(s: dict[str, str], flavour: str, version: tuple[int, ...] | None,
                counted: dict[str, list[int]] | None = None) -> list[Allocation]:
    """Every buffer this server version asks my_large_malloc() for, with large_pages=ON.
    `counted` holds block counts the running server reports (exact), else the source formulas
    estimate them."""
    counted = counted or {}
    out: list[Allocation] = []
    size = lambda k: parse_size(k, s.get(k, DEFAULTS.get(k, "0")))  # noqa: E731
    if str(s.get("innodb", "ON")).upper() not in ("OFF", "0"):
        pool = size("innodb_buffer_pool_size")
        if single_allocation_pool(flavour, version):
            # One mmap of the pool rounded up to 8 MiB (measured 10.11.19: 300M -> 304 MiB,
            # 1001M -> 1008 MiB; with large pages innodb_buffer_pool_size_max is ignored).
            out.append(Allocation("InnoDB buffer pool", -(-pool // (8 * MiB)) * 8 * MiB, True,
                                  "innodb_buffer_pool_size rounded up to 8 MiB (MDEV-29445)"))
        else:
            # One allocation per chunk: the chunk plus its block descriptors, rounded to the
            # page size (buf0buf.cc buf_chunk_init); the pool is rounded up to a multiple of
            # chunk_size x instances (MySQL manual, Configuring InnoDB Buffer Pool Size).
            inst = max(1, int(s.get("innodb_buffer_pool_instances", "1") or 1))
            chunk = size("innodb_buffer_pool_chunk_size") or 128 * MiB
            if chunk * inst > pool:
                chunk = max(MiB, pool // inst)
            n = -(-pool // (chunk * inst)) * inst
            page = size("innodb_page_size") or 16384
            # sizeof(buf_block_t) differs per version; 512 B is above every one we know.
            desc = -(-(chunk // page * 512) // page) * page
            out += [Allocation(f"InnoDB buffer pool chunk {i + 1}", chunk + desc, False,
                               "chunk + block descriptors (buf_chunk_init)") for i in range(n)]
        if flavour == "mariadb" and version and version >= (10, 5) \
                and not _bool_on(s.get("innodb_log_file_mmap")):
            lb = size("innodb_log_buffer_size")
            exact = version >= (10, 8)
            out += [Allocation(f"InnoDB log buffer {i}", lb, exact, "innodb_log_buffer_size "
                               "(log_sys.buf and flush_buf)") for i in (1, 2)]
        if flavour == "mariadb" and version and version >= (10, 6) \
                and str(s.get("innodb_use_native_aio", "ON")).upper() not in ("OFF", "0"):
            # Measured on 10.11.19 (io_uring): at some starts 4 + 2 MiB more huge pages are
            # mapped, lazily, for asynchronous I/O; never with innodb_use_native_aio=OFF. A
            # pool without them lets the log buffer that is mapped next fall back silently.
            out.append(Allocation("InnoDB asynchronous I/O (io_uring), at some starts",
                                  AIO_ALLOWANCE, True, "allowance, measured 0-6 MiB",
                                  allowance=True))
    kbs = size("key_buffer_size")
    if kbs:
        block = size("key_cache_block_size") or 1024
        segs = int(s.get("key_cache_segments", "0") or 0)
        parts = counted.get("key_cache")
        if parts:
            out += [Allocation(f"key cache{f' segment {i + 1}' if len(parts) > 1 else ''}",
                               b * block, True, "blocks the server reports "
                               "(information_schema.KEY_CACHES)") for i, b in enumerate(parts)]
        else:
            hs = int(s.get("key_cache_file_hash_size", "512") or 512)
            per = kbs // segs if segs else kbs  # init_partitioned_key_cache splits evenly
            b = _cache_blocks(per, block, KEYCACHE_STRUCTS, hs)
            out += [Allocation(f"key cache{f' segment {i + 1}' if segs else ''}", b * block,
                               False, "init_simple_key_cache formula") for i in range(segs or 1)
                    if b]
    if flavour == "mariadb":
        aps = size("aria_pagecache_buffer_size")
        block = size("aria_block_size") or 8192
        if "aria" in counted:
            out.append(Allocation("Aria page cache", counted["aria"][0] * block, True,
                                  "Aria_pagecache_blocks_used + _unused"))
        elif aps:
            hs = int(s.get("aria_pagecache_file_hash_size", "512") or 512)
            b = _cache_blocks(aps, block, PAGECACHE_STRUCTS, hs)
            if b:
                out.append(Allocation("Aria page cache", b * block, False,
                                      "init_pagecache formula"))
    return out


def _bool_on(value: str | None) -> bool:
    return str(value or "").strip().upper() in ("ON", "1", "TRUE", "YES")


def pages_needed(allocs: list[Allocation], page_kb: int) -> int:
    """Each allocation is its own mapping rounded up to the page size; one smaller than a page
    is not put on huge pages at all (measured: a 1 MiB Aria cache stays on 4 KiB pages)."""
    page = page_kb * 1024
    return sum(pages_for(a.bytes, page) for a in allocs if a.bytes >= page)


# --------------------------------------------------------------------------- servers

@dataclass
class Server:
    pid: int | None
    datadir: str | None = None
    socket: str | None = None
    port: int | None = None
    owner: str | None = None
    owner_uid: int | None = None
    flavour: str = "mariadb"
    version: str | None = None
    argv: tuple[str, ...] = ()
    cwd: str | None = None
    settings: dict[str, str] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    options: OptionFiles = field(default_factory=OptionFiles)
    counted: dict[str, list[int]] = field(default_factory=dict)
    connected_as: str | None = None
    supervisor: tuple[int, tuple[str, ...]] | None = None  # mysqld_safe parent
    engines: tuple[str, ...] = ()
    next_start: dict[str, str] | None = None  # what the option files + command line say now

    @property
    def vt(self) -> tuple[int, ...] | None:
        return version_tuple(self.version)

    @property
    def log_error(self) -> str | None:
        le = self.settings.get("log_error")
        if not le or le in ("ON", "stderr"):
            return None
        return le if os.path.isabs(le) or not self.datadir else os.path.join(self.datadir, le)


def parse_dsn(dsn: str) -> dict:
    """mysql://user:password@host:port/ or mysql://user@localhost/?unix_socket=/path."""
    u = urlparse(dsn)
    if u.scheme not in ("mysql", "mariadb"):
        raise InputError(f"{redact_dsn(dsn)}: a MySQL DSN starts with mysql:// or mariadb://")
    q = parse_qs(u.query)
    kw: dict = {"user": unquote(u.username) if u.username else "root"}
    if u.password:
        kw["password"] = unquote(u.password)
    if "unix_socket" in q:
        kw["unix_socket"] = q["unix_socket"][0]
    else:
        kw["host"] = u.hostname or "127.0.0.1"
        kw["port"] = u.port or 3306
    return kw


def connect(server: Server | None = None, dsn: str | None = None, timeout: int = 3):
    """A mysql-connector connection (imported only when there is a server to talk to): over
    the server's socket as root (unix_socket authentication on Debian), or with a DSN."""
    import mysql.connector
    kw = parse_dsn(dsn) if dsn else {"unix_socket": server.socket, "user": "root"}
    return mysql.connector.connect(connection_timeout=timeout, autocommit=True, **kw)


def _is_my_dsn(dsn: str) -> bool:
    return bool(re.match(r"^(mysql|mariadb)://", dsn))


def _secret_free(text: str, dsn: str | None) -> str:
    if not dsn:
        return text
    pw = parse_dsn(dsn).get("password")
    text = text.replace(dsn, redact_dsn(dsn))
    return text.replace(pw, "***") if pw else text


def _first_line(exc: Exception) -> str:
    return " ".join((str(exc).strip() or type(exc).__name__).split())[:300]


def hugetlb_mappings(maps: list[Mapping] | None) -> list[Mapping]:
    return [m for m in maps or [] if m.hugetlb]


def fallback_lines(sr: SysRoot, server: Server) -> list[str] | None:
    """Fallback warnings the server logged since it started (its "as process PID" line), or
    None when the error log is not a readable file."""
    path = server.log_error
    if not path:
        return None
    # The tail only: an error log can be gigabytes; startup warnings of the running process
    # follow its "as process PID" line, which a server that has logged 8 MiB since is unlikely
    # to have pushed out (smaps remains the evidence then).
    text = sr.read_tail(path, 8 << 20, quiet_missing=True)
    if text is None:
        return None
    lines = text.splitlines()
    start = 0
    if server.pid:
        for n in range(len(lines) - 1, -1, -1):
            if f"as process {server.pid}" in lines[n]:
                start = n
                break
    return [ln for ln in lines[start:] if FALLBACK_RE.search(ln)]


# --------------------------------------------------------------------------- apply actions

def _spec_of(s: Server) -> dict:
    return {"engine": "mysql", "datadir": s.datadir, "socket": s.socket, "pid": s.pid,
            "argv": list(s.argv), "cwd": s.cwd or "/", "owner": s.owner,
            "log_error": s.log_error, "supervisor": list(s.supervisor[1]) if s.supervisor else None}


class MyOption(ServerSetting):
    """One server option in an option file: a drop-in file of its own in the server's include
    directory, or the option's line in the [mysqld] group of the file that has one. Restore puts
    the file's old bytes back (or removes the drop-in)."""
    kind = "my_option"
    how = "option file"

    def __init__(self, path: str, name: str, value: str, dropin: bool, **server):
        self.path, self.name, self.value, self.dropin, self.s = path, name, value, dropin, server

    def spec(self) -> dict:
        return {**self.s, "kind": self.kind, "path": self.path, "name": self.name,
                "value": self.value, "dropin": self.dropin}

    @property
    def label(self) -> str:
        return f"{self.name} in {self.path}"

    def _file(self) -> File:
        return File(self.path, 0o644, 0, 0)

    def get(self) -> dict:
        raw = self._file().get()
        value = None
        if raw is not None:
            for line in (File.decode(raw) or "").splitlines():
                name, eq, v = line.strip().partition("=")
                if norm(name) in (self.name, f"loose_{self.name}"):
                    value = _strip_value(v) if eq else "ON"
        return {"value": value, "file": raw}

    def render(self, current: str | None) -> str:
        if self.dropin:
            return (f"# Written by hpadvise apply (undo: hpadvise rollback)\n[mysqld]\n"
                    f"{self.name} = {self.value}\n")
        lines = (current or "").splitlines()
        group = None
        for n, line in enumerate(lines):
            st = line.strip()
            if st.startswith("["):
                group = st.strip("[] ").lower()
            elif group == "mysqld" and norm(st.partition("=")[0]) == self.name:
                lines[n] = f"{self.name} = {self.value}"
                return "\n".join(lines) + "\n"
        for n, line in enumerate(lines):
            if line.strip().lower() == "[mysqld]":
                lines.insert(n + 1, f"{self.name} = {self.value}")
                return "\n".join(lines) + "\n"
        return "\n".join(lines + ["[mysqld]", f"{self.name} = {self.value}"]) + "\n"

    def set(self, value: dict) -> None:
        cur = File.decode(self._file().get())
        self._file().set(File.encode(self.render(cur)))

    def verify(self, value: dict) -> tuple[bool, dict]:
        actual = self.get()
        return (actual["value"] or "").upper() == value["value"].upper(), actual

    def restore(self, old: dict) -> None:
        self._file().set(old["file"])

    def same(self, old: dict, new: dict) -> bool:
        return (old["value"] or "").upper() == (new["value"] or "").upper()


class MyRestart(Restart):
    """Restart a server and check from smaps and its error log that it got its huge pages.
    Through systemd when it is a unit; otherwise a clean shutdown (SIGTERM) and the same
    command line again as the same user (its mysqld_safe parent's, when it has one)."""
    kind = "my_restart"

    @property
    def label(self) -> str:
        return f"restart mysql:{self.s.get('datadir')}"

    def _pid(self) -> int | None:
        """The server's current pid: a live (not zombie) mariadbd/mysqld with the same command
        line, or the pid we knew if it still runs."""
        live = [p for p in ProcTable(SysRoot("/")).by_name("mariadbd", "mysqld")
                if proc_state(p.pid) not in ("Z", "X", "?")]
        for p in live:
            if p.cmdline and tuple(p.cmdline) == tuple(self.s["argv"]):
                return p.pid
        return next((p.pid for p in live if p.pid == self.s.get("pid")), None)

    def set(self, value=True) -> None:
        import pwd
        pid = self._pid()
        unit = systemd_unit(pid) if pid else None
        if unit:
            r = subprocess.run(["systemctl", "restart", unit], capture_output=True, text=True,
                               timeout=900)
            if r.returncode != 0:
                raise ActionError(f"{self.label} failed: {r.stderr.strip()[-300:]}")
            return
        if pid:
            os.kill(pid, signal.SIGTERM)  # mysqld shuts down cleanly on SIGTERM
            deadline = time.time() + 900
            while os.path.exists(f"/proc/{pid}") and proc_state(pid) != "Z":
                if time.time() > deadline:
                    raise ActionError(f"{self.label}: pid {pid} did not stop within 15 minutes")
                time.sleep(0.1)
        argv = self.s.get("supervisor") or self.s["argv"]
        pw = pwd.getpwnam(self.s["owner"]) if self.s.get("owner") else None
        kw: dict = {"cwd": self.s.get("cwd") or "/", "start_new_session": True,
                    "stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
                    "stderr": subprocess.DEVNULL,
                    "env": {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                            "HOME": pw.pw_dir if pw else "/"}}
        if pw and os.geteuid() == 0 and pw.pw_uid != 0 and not self.s.get("supervisor"):
            kw.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
        try:
            proc = subprocess.Popen(argv, **kw)
        except OSError as exc:
            raise ActionError(f"{self.label}: cannot start {argv[0]}: {exc.strerror}") from None
        deadline = time.time() + 900
        while time.time() < deadline:
            if self._ready():
                self.s["pid"] = self._pid()
                return
            if proc.poll() is not None and not self.s.get("supervisor"):
                raise ActionError(f"{self.label}: the server exited at start"
                                  + _log_tail(self.s.get("log_error")))
            time.sleep(0.2)
        raise ActionError(f"{self.label}: not accepting connections after 15 minutes")

    def _ready(self) -> bool:
        return server_greets(self.s.get("socket"))

    def verify(self, value=True) -> tuple[bool, str]:
        pid = self._pid()
        if not pid:
            return False, "not running"
        maps = hugetlb_mappings(Proc(SysRoot("/"), pid).smaps)
        srv = Server(pid=pid, datadir=self.s.get("datadir"),
                     settings={"log_error": self.s.get("log_error") or ""})
        bad = fallback_lines(SysRoot("/"), srv) or []
        if bad:
            return False, f"fell back to normal pages: {bad[-1].strip()[-160:]}"
        if not maps:
            return False, "no huge page mappings in smaps"
        kb_ = sum(m.size_kb for m in maps)
        return True, f"{len(maps)} huge page mappings, {fmt_bytes(kb_ * 1024)}"


def _log_tail(path: str | None) -> str:
    if not path:
        return ""
    try:
        lines = [ln for ln in Path(path).read_text(errors="replace").splitlines()
                 if "ERROR" in ln or "[ERROR]" in ln]
    except OSError:
        return ""
    return f": {lines[-1].strip()[-200:]}" if lines else ""


# --------------------------------------------------------------------------- the engine

class MySQLEngine(Engine):
    """MySQL and MariaDB: static huge pages for the buffers my_large_malloc() places there.

    Sizing: every large-page allocation of the running version (buffer pool, log buffers, key
    cache segments, Aria page cache), each rounded up to the page size, with block counts read
    from the server when connected. Recommends large_pages=ON and catches the silent fallback
    in the error log and smaps."""

    name = "mysql"
    description = "MySQL / MariaDB (InnoDB buffer pool, log buffers, key caches, Aria cache)"
    process_names = ("mariadbd", "mysqld")
    profile_schema = {"large_pages": (str, ("ON", "OFF"), "ON")}

    def __init__(self, connect_timeout: int = 3):
        self.connect_timeout = connect_timeout

    # ---- discover
    def discover(self, host: HostFacts, procs: ProcTable, targets: Targets) -> list[Instance]:
        sr = procs.sr
        servers = []
        mine = procs.by_name(*self.process_names)
        pids = {p.pid for p in mine}
        for p in mine:
            if p.ppid in pids or not p.cmdline:
                continue
            servers.append(self._from_process(sr, procs, p))
        out = []
        used = set()
        for dsn in targets.dsns:
            if not _is_my_dsn(dsn):
                continue
            match = self._by_dsn(dsn, servers)
            if isinstance(match, Instance):
                out.append(match)
                continue
            used.add(id(match))
            out.append(self._running(sr, procs, match, host, dsn))
        for s in servers:
            if id(s) not in used:
                out.append(self._running(sr, procs, s, host, None))
        return out

    def _from_process(self, sr: SysRoot, procs: ProcTable, p: Proc) -> Server:
        argv = p.cmdline
        owner = procs.user(p.uid)
        s = Server(pid=p.pid, argv=argv, owner=owner, owner_uid=p.uid,
                   flavour="mariadb" if p.comm == "mariadbd" else "mysql",
                   cwd=sr.readlink(f"/proc/{p.pid}/cwd"))
        parent = Proc(sr, p.ppid) if p.ppid else None
        if parent is not None and parent.comm in ("mysqld_safe", "mariadbd-safe") \
                and parent.cmdline:
            s.supervisor = (parent.pid, parent.cmdline)
        return s

    def _binary_version(self, sr: SysRoot, pid: int) -> str | None:
        """Without a connection, the server binary answers --version (~30 ms)."""
        exe = sr.readlink(f"/proc/{pid}/exe")
        if not exe or not sr.live:
            return None
        exe = exe.replace(" (deleted)", "")
        try:
            r = subprocess.run([exe, "--no-defaults", "--version"], capture_output=True,
                               text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        mt = re.search(r"Ver\s+(\S+)", r.stdout)
        return mt.group(1) if mt else None

    def _by_dsn(self, dsn: str, servers: list[Server]):
        probe = Server(pid=None)
        try:
            self._query(probe, dsn)
        except Exception as exc:
            inst = Instance(self.name, f"mysql:{redact_dsn(dsn)}", redact_dsn(dsn), False)
            inst.errors.append(f"cannot connect to {redact_dsn(dsn)}: "
                               f"{_secret_free(_first_line(exc), dsn)}; check user, password, "
                               "host and port")
            return inst
        for s in servers:
            s_dir = s.cwd or s.datadir or cmdline_settings(s.argv).get("datadir", ("",))[0]
            if s_dir and os.path.realpath(s_dir) == os.path.realpath(probe.datadir or "\0"):
                return s
        probe.pid = None
        return probe

    def _read_files(self, sr: SysRoot, s: Server) -> None:
        """Option files and command line; what the server reported itself (origin "server")
        wins over them."""
        files, extra = default_files(s.argv, None)
        groups = server_groups(s.flavour, s.vt)
        of = OptionFiles()
        for f in files + extra:
            read_option_file(sr, f, groups, of)
        s.options = of
        for k in [k for k, o in s.origins.items() if o != "server"]:
            s.settings.pop(k, None)
            s.origins.pop(k, None)
        merged = {**of.settings, **cmdline_settings(s.argv)}
        s.next_start = {k: v for k, (v, _) in merged.items()}
        for k, (v, origin) in merged.items():
            if s.origins.get(k) != "server":
                s.settings[k], s.origins[k] = v, origin

    def _query(self, s: Server, dsn: str | None) -> None:
        with _closing(connect(s, dsn, self.connect_timeout)) as conn:
            cur = conn.cursor()
            cur.execute("SHOW GLOBAL VARIABLES")
            allv = {k.lower(): v for k, v in cur.fetchall()}
            for k in QUERY_VARS:
                if k in allv:
                    s.settings[k] = str(allv[k])
                    s.origins[k] = "server"
            cur.execute("SELECT CURRENT_USER()")
            s.connected_as = cur.fetchone()[0]
            cur.execute("SELECT ENGINE FROM information_schema.ENGINES "
                        "WHERE SUPPORT IN ('YES', 'DEFAULT')")
            s.engines = tuple(r[0].lower() for r in cur.fetchall())
            if "innodb" not in s.engines:
                s.settings["innodb"], s.origins["innodb"] = "OFF", "server"
            try:  # exact block counts: used + unused = all blocks (mf_keycache.c)
                cur.execute("SELECT SEGMENT_NUMBER, USED_BLOCKS + UNUSED_BLOCKS FROM "
                            "information_schema.KEY_CACHES WHERE KEY_CACHE_NAME = 'default'")
                rows = cur.fetchall()
                segs = [int(b) for n, b in rows if n is not None]
                total = [int(b) for n, b in rows if n is None]
                if segs or total:
                    s.counted["key_cache"] = segs or total
            except Exception:
                pass  # MySQL has no KEY_CACHES table: the formula estimates it
            cur.execute("SHOW GLOBAL STATUS LIKE 'Aria_pagecache_blocks_u%'")
            st = {k.lower(): int(v) for k, v in cur.fetchall()}
            if len(st) == 2:
                s.counted["aria"] = [sum(st.values())]
        s.version = s.settings.get("version") or s.version
        if "mariadb" in (s.version or "").lower():
            s.flavour = "mariadb"
        s.datadir = s.settings.get("datadir", s.datadir)
        if s.settings.get("port", "").isdigit():
            s.port = int(s.settings["port"])
        s.socket = s.settings.get("socket") or s.socket

    def _running(self, sr: SysRoot, procs: ProcTable, s: Server, host: HostFacts,
                 dsn: str | None) -> Instance:
        errors: list[str] = []
        try:
            self._read_files(sr, s)
        except OptionFileError as exc:
            errors.append(str(exc))
        # mysqld changes into its data directory at start (sql/mysqld.cc, my_setwd), so its
        # cwd names the datadir even when no option says it.
        s.datadir = s.cwd or s.settings.get("datadir") or s.datadir or "/var/lib/mysql"
        s.socket = s.settings.get("socket") or "/run/mysqld/mysqld.sock"
        if s.settings.get("port", "").isdigit():
            s.port = int(s.settings["port"])
        note = None
        if s.pid is not None:
            if not sr.live:
                note = "offline audit of a snapshot"
            elif errors:
                note = "option files unreadable: not connecting to a guessed socket"
            else:
                expected = s.datadir
                try:
                    self._query(s, dsn)
                    if os.path.realpath(s.datadir.rstrip("/")) != os.path.realpath(expected.rstrip("/")):
                        raise RuntimeError(f"the server on {s.socket} serves {s.datadir}, not "
                                           f"{expected}")
                except Exception as exc:
                    msg = _secret_free(_first_line(exc), dsn)
                    if dsn:
                        errors.append(f"cannot connect to {redact_dsn(dsn)}: {msg}")
                    note = msg
                    s.datadir = expected
        if s.version is None and s.pid and sr.live:
            s.version = self._binary_version(sr, s.pid)
            if s.version and "mariadb" in s.version.lower():
                s.flavour = "mariadb"
        if s.version and s.options.versioned and not errors:
            try:  # [mysqld-X.Y] groups apply to this version only: read again knowing it
                self._read_files(sr, s)
            except OptionFileError as exc:
                errors.append(str(exc))
        inst = self._instance(s, running=True)
        inst.errors += errors
        if s.pid is None:
            inst.findings.append(Finding(
                "info", "my.not_local", "Server is not running on this host",
                "Its huge pages must be reserved on the host that runs it; the demand below is "
                "computed from its settings.", f"datadir={s.datadir}", instance=inst.id))
        if note:
            inst.findings.append(Finding(
                "info", "my.no_connection", "Settings read from the option files",
                "Without a connection the values come from my.cnf and its includes and the "
                "command line, and cache block counts are estimated. Pass --dsn "
                "mysql://user:password@host:port/ to connect.", note, instance=inst.id))
        if not errors:
            try:
                self._observe(inst, s, sr, procs, host)
                self._size(inst, s, host)
            except OptionFileError as exc:
                inst.errors.append(str(exc))
        return inst

    def _instance(self, s: Server, running: bool) -> Instance:
        networked = s.settings.get("skip_networking", "OFF").upper() in ("OFF", "0") \
            and s.port is not None
        iid = f"mysql:{s.port}" if networked else f"mysql:{s.datadir}"
        shown = {k: s.settings[k] for k in ("innodb_buffer_pool_size", "large_pages",
                                            "innodb_log_buffer_size", "key_buffer_size",
                                            "aria_pagecache_buffer_size") if k in s.settings}
        shown["data_directory"] = s.datadir
        if s.port:
            shown["port"] = s.port
        shown["flavour"] = s.flavour
        return Instance(self.name, iid, f"{s.datadir} ({s.flavour}, port {s.port or '?'})",
                        running, pid=s.pid, owner=s.owner, version=s.version, settings=shown,
                        private={"server": s})

    def _observe(self, inst: Instance, s: Server, sr: SysRoot, procs: ProcTable,
                 host: HostFacts) -> None:
        if not s.pid:
            return
        p = Proc(sr, s.pid)
        maps = p.smaps
        if maps is None:
            inst.private["observe_note"] = f"smaps unreadable: run as root or as {s.owner}"
        else:
            huge = hugetlb_mappings(maps)
            inst.private["huge_maps"] = huge
            if huge:
                inst.backing = "hugetlb"
                inst.backing_page_kb = max(m.kernel_page_kb for m in huge)
            else:
                inst.backing = "thp" if any(m.anon_huge_kb for m in maps) else "4k"
                inst.backing_page_kb = host.thp.pmd_size_kb if inst.backing == "thp" \
                    else host.base_page_bytes // 1024
            inst.private["anon_huge_kb"] = sum(m.anon_huge_kb for m in maps)
        inst.private["thp_enabled"] = p.status.get("THP_enabled")
        inst.page_tables_kb = p.vm_pte_kb
        inst.private["fallback"] = fallback_lines(sr, s)

    def _size(self, inst: Instance, s: Server, host: HostFacts) -> None:
        page_kb = host.default_hugepage_kb or 2048
        allocs = allocations(s.settings, s.flavour, s.vt, s.counted)
        sizes = sorted(set(host.page_sizes_kb) | {page_kb})
        pages = {kb_: pages_needed(allocs, kb_) for kb_ in sizes}
        exact = all(a.exact for a in allocs) and bool(s.vt)
        huge = inst.private.get("huge_maps") or []
        held = sum(-(-m.size_kb // m.kernel_page_kb) for m in huge if m.kernel_page_kb == page_kb)
        parts = ", ".join(f"{a.what} {fmt_bytes(a.bytes)}" for a in allocs)
        inst.demand = Demand(inst.id, sum(a.bytes for a in allocs), page_kb, pages, exact,
                             f"large-page allocations of {s.flavour} {s.version or '?'}: {parts}",
                             selectable=False, held_pages=held)
        inst.private["allocations"] = allocs
        inst.private["required_pages"] = pages_needed([a for a in allocs if not a.allowance],
                                                      page_kb)

    # ---- findings
    def findings(self, inst: Instance, host: HostFacts, profile: Profile) -> list[Finding]:
        f: list[Finding] = []
        s: Server | None = inst.private.get("server")
        if s is None or inst.errors:
            return f
        iid = inst.id
        lp = _bool_on(s.settings.get("large_pages"))
        fallback = inst.private.get("fallback") or []
        huge = inst.private.get("huge_maps") or []
        d = inst.demand
        if s.settings.get("innodb", "ON").upper() == "OFF":
            f.append(Finding("info", "my.no_innodb", "InnoDB is not loaded",
                             "No buffer pool to place on huge pages; only the MyISAM/Aria "
                             "caches count.", "information_schema.ENGINES", "", iid))
        if inst.running and s.pid:
            held_kb = sum(m.size_kb for m in huge)
            # what must be on huge pages: the allowance may or may not be mapped
            want_kb = inst.private.get("required_pages", 0) * d.page_kb if d else 0
            if lp and (fallback or (inst.backing is not None and held_kb < want_kb)):
                ev = fallback[-1].strip()[-200:] if fallback else \
                    f"smaps: {fmt_bytes(held_kb * 1024)} on huge pages of " \
                    f"{fmt_bytes(want_kb * 1024)} expected"
                f.append(Finding(
                    "crit", "my.large_pages.fallback",
                    "large_pages = ON fell back to normal pages",
                    "The server could not map some buffers on huge pages and carried on with "
                    "4 KiB pages, logging only a warning. Size the pool with the count below "
                    "and restart.", ev, "mysys/my_largepage.c (continuing to smaller size)", iid))
            elif lp and huge:
                f.append(Finding(
                    "ok", "my.large_pages.active",
                    f"{len(huge)} buffers on {fmt_page(inst.backing_page_kb)} huge pages",
                    "Running on huge pages now.",
                    f"smaps: {fmt_bytes(held_kb * 1024)} in /anon_hugepage mappings", DOCS, iid))
            elif not lp:
                f.append(Finding(
                    "warn", "my.large_pages.off", "large_pages = OFF",
                    "The buffer pool is on 4 KiB pages: more TLB misses and page-table memory. "
                    "Set large_pages = ON with a pool of the size below.",
                    f"large_pages={s.settings.get('large_pages', 'OFF')} "
                    f"({s.origins.get('large_pages', 'default')})", DOCS, iid))
            if fallback is None and lp and inst.backing != "hugetlb":
                f.append(Finding("info", "my.log.unreadable", "Cannot read the error log",
                                 "The fallback warning goes only to the error log.",
                                 str(s.log_error or "log_error not set (stderr)"), DOCS, iid))
            thp = inst.private.get("thp_enabled")
            if thp == "0":
                f.append(Finding(
                    "info", "my.thp.disabled_by_server", "The server turned THP off for itself",
                    "MariaDB >= 10.6.17 calls prctl(PR_SET_THP_DISABLE) after allocating its "
                    "buffers, whatever the host's THP setting.", "/proc/PID/status THP_enabled: 0",
                    "MDEV-33279", iid))
            elif (inst.private.get("anon_huge_kb") or 0) > 0:
                f.append(Finding(
                    "info", "my.thp.anon", "Part of the server's memory is on THP",
                    "THP pages are not reserved; khugepaged and compaction work to keep them, "
                    "which MySQL and MariaDB advise against for latency.",
                    f"AnonHugePages {fmt_bytes(inst.private['anon_huge_kb'] * 1024)}",
                    "Documentation/admin-guide/mm/transhuge.rst", iid))
        vt = s.vt
        sysv = (s.flavour == "mysql" and vt and vt < (8, 0)) or \
            (s.flavour == "mariadb" and vt and vt < (10, 5))
        if sysv:
            gid = host.sysctls.get("vm.hugetlb_shm_group")
            f.append(Finding(
                "warn" if str(gid) in ("0", "None") else "info", "my.sysv_shm",
                "This version takes large pages through SysV shared memory",
                "It needs RLIMIT_MEMLOCK above the buffer pool for the server user and "
                "vm.hugetlb_shm_group set to the server's group.",
                f"vm.hugetlb_shm_group={gid}, memlock {host.memlock_soft}/{host.memlock_hard}",
                "MySQL 5.7 manual, 8.12.3.3 Enabling Large Page Support", iid))
        if inst.running and s.next_start is not None:
            pending = []
            for k in ("large_pages", "innodb_buffer_pool_size", "innodb_log_buffer_size",
                      "key_buffer_size", "aria_pagecache_buffer_size"):
                if s.origins.get(k) != "server" or k not in s.next_start:
                    continue
                now, nxt = s.settings[k], s.next_start[k]
                if k == "large_pages":
                    same = _bool_on(now) == _bool_on(nxt)
                else:
                    try:
                        same = parse_size(k, now) == parse_size(k, nxt)
                    except OptionFileError:
                        same = False
                if not same:
                    pending.append(f"{k}: {now} now, {nxt} at the next start")
            if pending:
                f.append(Finding(
                    "warn", "my.pending_restart", "Option files differ from the running server",
                    "The page count reflects what the server runs with now; the next start "
                    "uses the option files. Restart it to size for them.", "; ".join(pending),
                    "my.cnf vs SHOW GLOBAL VARIABLES", iid))
        if d and not d.exact:
            f.append(Finding("info", "my.demand.estimate", "Page count is an estimate",
                             d.source, "", DOCS, iid))
        return f

    def changes(self, inst: Instance, page_kb: int, host: HostFacts,
                profile: Profile) -> list[Change]:
        s: Server | None = inst.private.get("server")
        if s is None or inst.errors:
            return []
        want = profile.engine(self.name).get("large_pages", "ON")
        # What the next start gets (the option files), not what the server runs with now: an
        # edited file awaiting a restart must not hide a needed change.
        src = s.next_start if s.next_start is not None else s.settings
        cur = "ON" if _bool_on(src.get("large_pages")) else "OFF"
        if cur != want:
            return [Change("setting", "large_pages", cur, want,
                           "put the buffer pool on the reserved huge pages", inst.id,
                           restart=True)]
        return []

    # ---- apply
    def option_target(self, s: Server) -> tuple[str, bool]:
        """Where large_pages goes: a drop-in in the last include directory the server reads,
        else the last option file with a server group, else /etc/mysql/my.cnf."""
        if s.options.includedirs:
            return f"{s.options.includedirs[-1].rstrip('/')}/99-hpadvise.cnf", True
        if s.options.group_files:
            return s.options.group_files[-1], False
        files, _ = default_files(s.argv, None)
        return (files[0] if files and files[0] != "/etc/my.cnf" else "/etc/mysql/my.cnf"), False

    def actions(self, inst: Instance, changes: list[Change]) -> list[Action]:
        s: Server = inst.private["server"]
        path, dropin = self.option_target(s)
        return [MyOption(path, ch.target, str(ch.recommended), dropin, **_spec_of(s))
                for ch in changes if ch.kind == "setting" and ch.instance == inst.id]

    def restart_action(self, inst: Instance) -> Action | None:
        s: Server | None = inst.private.get("server")
        if s is None or not inst.running or not s.pid or not s.argv:
            return None
        return MyRestart(**_spec_of(s))

    def action_from_spec(self, spec: dict) -> Action:
        spec = dict(spec)
        kind = spec.pop("kind")
        if kind == "my_option":
            return MyOption(spec.pop("path"), spec.pop("name"), spec.pop("value"),
                            spec.pop("dropin"), **spec)
        if kind == "my_restart":
            return MyRestart(**spec)
        raise InputError(f"journal names an unknown mysql action {kind!r}")


class _closing:
    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        return self.conn

    def __exit__(self, *exc):
        try:
            self.conn.close()
        except Exception:
            pass
