"""MySQL/MariaDB sizing: every buffer the server places on huge pages with large_pages=ON.

- With large_pages=ON the server allocates a few big buffers with my_large_malloc()
  (mysys/my_largepage.c): an mmap(MAP_HUGETLB) per buffer on MariaDB >= 10.5 and MySQL 8, each
  rounded up to the huge page size; a buffer smaller than the huge page stays on normal pages.
- Which buffers (measured on MariaDB 10.11 here, docs/reference.md; sources named): the InnoDB
  buffer pool (storage/innobase/buf/buf0buf.cc), two InnoDB log buffers of
  innodb_log_buffer_size each (log_sys.buf and flush_buf, storage/innobase/log/log0log.cc,
  MariaDB >= 10.8), the MyISAM key cache's block area (mysys/mf_keycache.c,
  init_simple_key_cache, one per segment) and the Aria page cache's block area
  (storage/maria/ma_pagecache.c, init_pagecache).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpadvise.sizing import pages_for

from .conf import DEFAULTS, MiB, parse_size

# Struct sizes on LP64 from the definitions in mysys/mf_keycache.c (st_block_link: 5 pointers,
# 2 wait queues, requests, buffer, 5 ints, last_hit_time, condvar = 112 B; st_hash_link: 3
# pointers, file, diskpos, requests = 48 B) and storage/maria/ma_pagecache.c
# (st_pagecache_block_link 144 B; st_pagecache_hash_link with its PAGECACHE_FILE 112 B).
KEYCACHE_STRUCTS = (112, 48)
AIO_ALLOWANCE = 6 * MiB
PAGECACHE_STRUCTS = (144, 112)


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
            out.append(Allocation("InnoDB buffer pool", pages_for(pool, 8 * MiB) * 8 * MiB, True,
                                  "innodb_buffer_pool_size rounded up to 8 MiB (MDEV-29445)"))
        else:
            # One allocation per chunk: the chunk plus its block descriptors, rounded to the
            # page size (buf0buf.cc buf_chunk_init); the pool is rounded up to a multiple of
            # chunk_size x instances (MySQL manual, Configuring InnoDB Buffer Pool Size).
            inst = max(1, int(s.get("innodb_buffer_pool_instances", "1") or 1))
            chunk = size("innodb_buffer_pool_chunk_size") or 128 * MiB
            if chunk * inst > pool:
                chunk = max(MiB, pool // inst)
            n = pages_for(pool, chunk * inst) * inst
            page = size("innodb_page_size") or 16384
            # sizeof(buf_block_t) differs per version; 512 B is above every one we know.
            desc = pages_for(chunk // page * 512, page) * page
            out += [Allocation(f"InnoDB buffer pool chunk {i + 1}", chunk + desc, False,
                               "chunk + block descriptors (buf_chunk_init)") for i in range(n)]
        if flavour == "mariadb" and version and version >= (10, 5) \
                and not bool_on(s.get("innodb_log_file_mmap")):
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


def bool_on(value: str | None) -> bool:
    return str(value or "").strip().upper() in ("ON", "1", "TRUE", "YES")


def pages_needed(allocs: list[Allocation], page_kb: int) -> int:
    """Each allocation is its own mapping rounded up to the page size; one smaller than a page
    is not put on huge pages at all (measured: a 1 MiB Aria cache stays on 4 KiB pages)."""
    page = page_kb * 1024
    return sum(pages_for(a.bytes, page) for a in allocs if a.bytes >= page)


