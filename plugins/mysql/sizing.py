"""MySQL/MariaDB sizing: every buffer the server places on huge pages with large_pages=ON.

- With large_pages=ON the server allocates a few big buffers on large pages, each its own
  mapping rounded up to the huge page size; a buffer smaller than the huge page stays on
  normal pages. Which buffers, in how many mappings, through which call, differs by release:
  versions.py holds those rules with their sources, and this module applies them.
- The buffers (measured on MariaDB 10.11 here, docs/reference.md): the InnoDB buffer pool
  (storage/innobase/buf/buf0buf.cc; one mapping, or one per chunk), two InnoDB log buffers of
  innodb_log_buffer_size each (log_sys.buf and flush_buf, storage/innobase/log/log0log.cc,
  MariaDB >= 10.8), the MyISAM key cache's block area (mysys/mf_keycache.c,
  init_simple_key_cache, one per segment) and the Aria page cache's block area
  (storage/maria/ma_pagecache.c, init_pagecache).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from hpadvise.api.face import fmt_bytes, pages_for

from .conf import DEFAULTS, FLAVOUR_DEFAULTS, MiB, parse_size
from .versions import Model, model

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


@dataclass
class Allocation:
    what: str
    bytes: int
    exact: bool
    source: str
    allowance: bool = False  # not always mapped: counted so that it never takes others' pages
    chunk: int = 0  # one of the buffer pool's chunks, each its own mapping: the chunk's size


def allocations(s: dict[str, str], flavour: str, version: tuple[int, ...] | None,
                counted: dict[str, list[int]] | None = None,
                cpus: int | None = None) -> list[Allocation]:
    """Every buffer this server release asks for on large pages, with large_pages=ON, by the
    rules of versions.py. `counted` holds block counts the running server reports (exact),
    else the source formulas estimate them; `cpus` sizes MySQL 8.4's default instances."""
    counted = counted or {}
    m = model(flavour, version)
    defaults = {**DEFAULTS, **FLAVOUR_DEFAULTS.get(flavour, {})}
    size = lambda k: parse_size(k, s.get(k, defaults.get(k, "0")))  # noqa: E731
    out: list[Allocation] = []
    if str(s.get("innodb", "ON")).upper() not in ("OFF", "0"):
        pool = size("innodb_buffer_pool_size")
        if m.single_pool:
            # The pool rounded up to 8 MiB (measured 10.11.19: 300M -> 300 + 4 MiB mapped,
            # 1001M -> 1008 MiB; innodb_buffer_pool_size_max set to 1G or 8G: the same).
            out.append(Allocation("InnoDB buffer pool", pages_for(pool, 8 * MiB) * 8 * MiB, True,
                                  "innodb_buffer_pool_size rounded up to 8 MiB (MDEV-29445)"))
        else:
            out += _chunks(s, m, pool, size, cpus or os.cpu_count() or 1)
        if m.has("log_buffers") or m.has("log_buffers_old"):
            if not bool_on(s.get("innodb_log_file_mmap")):
                lb = size("innodb_log_buffer_size")
                out += [Allocation(f"InnoDB log buffer {i}", lb, m.has("log_buffers"),
                                   "innodb_log_buffer_size (log_sys.buf and flush_buf)")
                        for i in (1, 2)]
        if m.has("io_uring") \
                and str(s.get("innodb_use_native_aio", "ON")).upper() not in ("OFF", "0"):
            # Measured on 10.11.19 (io_uring): at some starts 4 + 2 MiB more huge pages are
            # mapped, lazily, for asynchronous I/O; never with innodb_use_native_aio=OFF. A
            # pool without them lets the log buffer that is mapped next fall back silently.
            out.append(Allocation("InnoDB asynchronous I/O (io_uring), at some starts",
                                  AIO_ALLOWANCE, True, "allowance, measured 0-6 MiB",
                                  allowance=True))
    if not m.has("key_cache_heap"):
        out += _key_cache(s, size, counted)
    if flavour == "mariadb":
        out += _aria(s, size, counted)
    return out


def _chunks(s: dict[str, str], m: Model, pool: int, size, cpus: int) -> list[Allocation]:
    """One allocation per chunk: the chunk plus its block descriptors, rounded to the InnoDB
    page size (buf0buf.cc buf_chunk_init), plus the allocator's header where there is one; the
    pool is rounded up to a multiple of chunk_size x instances (MySQL manual, Configuring
    InnoDB Buffer Pool Size)."""
    chunk = size("innodb_buffer_pool_chunk_size") if s.get("innodb_buffer_pool_chunk_size") \
        not in (None, "", "0") else m.chunk_default(pool, 2 * MiB)
    inst = 1 if m.has("instances_one") else \
        int(s.get("innodb_buffer_pool_instances") or 0) or m.instances(pool, chunk, cpus)
    if chunk * inst > pool:
        chunk = max(MiB, pool // inst)
    n = pages_for(pool, chunk * inst) * inst
    page = size("innodb_page_size") or 16384
    desc = pages_for(chunk // page * m.block_descriptor, page) * page
    extra = f" + {m.chunk_header} B allocator header" if m.chunk_header else ""
    # exact on the release whose chunk mappings were counted here (versions.MEASURED_MYSQL)
    return [Allocation(f"InnoDB buffer pool chunk {i + 1}", chunk + desc + m.chunk_header,
                       m.this_release_measured and m.flavour == "mysql",
                       f"chunk + block descriptors (buf_chunk_init){extra}", chunk=chunk)
            for i in range(n)]


def _key_cache(s: dict[str, str], size, counted: dict[str, list[int]]) -> list[Allocation]:
    kbs = size("key_buffer_size")
    if not kbs:
        return []
    block = size("key_cache_block_size") or 1024
    segs = int(s.get("key_cache_segments", "0") or 0)
    parts = counted.get("key_cache")
    if parts:
        return [Allocation(f"key cache{f' segment {i + 1}' if len(parts) > 1 else ''}",
                           b * block, True, "blocks the server reports "
                           "(information_schema.KEY_CACHES)") for i, b in enumerate(parts)]
    hs = int(s.get("key_cache_file_hash_size", "512") or 512)
    per = kbs // segs if segs else kbs  # init_partitioned_key_cache splits evenly
    b = _cache_blocks(per, block, KEYCACHE_STRUCTS, hs)
    return [Allocation(f"key cache{f' segment {i + 1}' if segs else ''}", b * block,
                       False, "init_simple_key_cache formula") for i in range(segs or 1) if b]


def _aria(s: dict[str, str], size, counted: dict[str, list[int]]) -> list[Allocation]:
    block = size("aria_block_size") or 8192
    if "aria" in counted:
        return [Allocation("Aria page cache", counted["aria"][0] * block, True,
                           "Aria_pagecache_blocks_used + _unused")]
    aps = size("aria_pagecache_buffer_size")
    if not aps:
        return []
    hs = int(s.get("aria_pagecache_file_hash_size", "512") or 512)
    b = _cache_blocks(aps, block, PAGECACHE_STRUCTS, hs)
    return [Allocation("Aria page cache", b * block, False, "init_pagecache formula")] if b \
        else []


def chunk_fallback(allocs: list[Allocation], huge_kb: list[int], log: list[str]) -> \
        tuple[int, int, int] | None:
    """For a pool mapped chunk by chunk: (chunks, chunk mappings on huge pages, fallback
    warnings in the log for a chunk-sized allocation). Each chunk is its own mapping of at least
    the chunk's size (buf0buf.cc allocate_chunk), and one that cannot be mapped on huge pages
    falls back alone, logging one warning (large_page_alloc-linux.h); None for one mapping."""
    chunks = [a.chunk for a in allocs if a.chunk]
    if not chunks:
        return None
    floor = min(chunks)
    on_huge = sum(1 for kb in huge_kb if kb * 1024 >= floor)
    logged = 0
    for line in log:
        mt = re.search(r"(?:mmap\(|allocate )(\d+) bytes", line)
        if mt and int(mt.group(1)) >= floor:
            logged += 1
    return len(chunks), min(on_huge, len(chunks)), logged


def describe(allocs: list[Allocation]) -> str:
    """The allocations for people: chunks of one size said once, with their count."""
    chunks = [a for a in allocs if a.chunk]
    rest = [f"{a.what} {fmt_bytes(a.bytes)}" for a in allocs if not a.chunk]
    if chunks:
        rest.insert(0, f"InnoDB buffer pool {len(chunks)} chunk mapping"
                       f"{'s' if len(chunks) > 1 else ''} of {fmt_bytes(chunks[0].bytes)}")
    return ", ".join(rest)


def bool_on(value: str | None) -> bool:
    return str(value or "").strip().upper() in ("ON", "1", "TRUE", "YES")


def pages_needed(allocs: list[Allocation], page_kb: int) -> int:
    """Each allocation is its own mapping rounded up to the page size; one smaller than a page
    is not put on huge pages at all (measured: a 1 MiB Aria cache stays on 4 KiB pages)."""
    page = page_kb * 1024
    return sum(pages_for(a.bytes, page) for a in allocs if a.bytes >= page)


