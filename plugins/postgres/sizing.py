"""PostgreSQL sizing: how many huge pages a cluster's main shared memory segment needs.

- PG >= 15 computes the count itself: shared_memory_size_in_huge_pages =
  floor(shared memory bytes / huge page size) + 1 (src/backend/storage/ipc/ipci.c,
  InitializeShmemGUCs). `postgres -C` reports it for a stopped cluster, as the cluster owner,
  against a shadow of its data directory (preflight.py: the real one is never written), with
  the options of its last start (opts.py), which outrank its files.
- PG <= 14 cannot report it, nor can a cluster whose major has no binary here: a per-major model
  fitted to the servers' own figures gives an estimate that errs high (estimate_bytes).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpadvise.api.face import Demand, HostFacts, Instance, Mapping, pages_for

from .conf import BLCKSZ, DEFAULTS, GUC_UNIT_BYTES, ConfError, parse_int, parse_memory
from .opts import as_args
from .preflight import as_owner, shadow

if TYPE_CHECKING:
    from .state import Cluster


def page_kb_of(huge_page_size: int, host: HostFacts) -> int | None:
    """The page size PostgreSQL will ask for: huge_page_size, or 0 = the kernel's default size
    (GetHugePageSize in sysv_shmem.c reads Hugepagesize from /proc/meminfo)."""
    return huge_page_size // 1024 if huge_page_size else host.default_hugepage_kb




def pages_from_bytes(size_b: int, page_kb: int) -> int:
    """ipci.c InitializeShmemGUCs: hp_required = size_b / hp_size + 1."""
    return size_b // (page_kb * 1024) + 1


@dataclass(frozen=True)
class ShmemTerms:
    """One major's shared memory as a linear model of the settings that size it, fitted to
    that major's own `postgres -C shared_memory_size` over a grid of settings (the lab's
    pg_shmem_fit.py; 72 settings per major, docs/reference.md): bytes = fixed + per_buffer x
    NBuffers + per_slot x (backend slots + prepared transactions) + per_lock x
    max_locks_per_transaction x (the same) + per_aio x (I/O processes x io_max_concurrency)
    + wal_buffers + min_dynamic_shared_memory, plus `margin`: the largest shortfall of the fit
    on the grid (the lock tables grow in powers of two) and the server's 1 MB rounding, and
    1% on the lock term (estimate_bytes)."""
    fixed: int
    per_buffer: float
    per_slot: float
    per_lock: float
    per_aio: float
    margin: int
    measured: str  # the release the terms were fitted to


MiB = 1 << 20
SHMEM_TERMS = {
    15: ShmemTerms(3657565, 8376.6, 24489.1, 404.6, 0, 8 * MiB, "15 (Debian)"),
    16: ShmemTerms(3659842, 8376.9, 24167.4, 404.2, 0, 8 * MiB, "16.2"),
    # 18: asynchronous I/O adds handles for every I/O process (the backend slots and 38
    # auxiliary ones, 32 of them I/O workers) times io_max_concurrency (-1: NBuffers / those
    # processes, between 1 and 64); the fit is tight (+-1.6 MB) only with that term.
    18: ShmemTerms(3130067, 8445.2, 23271.1, 419.2, 539.7, 3 * MiB, "18.6"),
}
# 17: no binary here; each term the larger of 16's and 18's, so it errs high.
SHMEM_TERMS[17] = ShmemTerms(
    *(max(getattr(SHMEM_TERMS[16], f), getattr(SHMEM_TERMS[18], f) if f != "per_aio" else 0)
      for f in ("fixed", "per_buffer", "per_slot", "per_lock", "per_aio", "margin")),
    "the larger of 16 and 18")
AIO_AUX_PROCS = 38
# 18 reserves the autovacuum workers' process slots with autovacuum_worker_slots (default 16),
# autovacuum_max_workers only caps how many run; with the launcher and the slot sync worker
# (NUM_SPECIAL_WORKER_PROCS = 2, storage/proc.h): MaxBackends = max_connections +
# autovacuum_worker_slots + max_worker_processes + max_wal_senders + 2 (postinit.c,
# InitializeMaxBackends). Before 18: autovacuum_max_workers + 1 (the launcher).
AV_SLOTS_18 = 16


def autovacuum_slots(s: dict[str, int], major: int | None) -> int:
    """The backend slots the autovacuum launcher and workers (and, 18+, the slot sync worker)
    take in MaxBackends."""
    if (major or 0) >= 18:
        return s.get("autovacuum_worker_slots", AV_SLOTS_18) + 2
    return s["autovacuum_max_workers"] + 1


def shmem_terms(major: int | None) -> ShmemTerms:
    """13 and 14 lack what 15 added (cumulative statistics in shared memory): 15's terms err
    high for them; a later major than 18 gets 18's."""
    if major is None or major <= 15:
        return SHMEM_TERMS[15]
    return SHMEM_TERMS[min(major, 18)]


def io_uring_ring_bytes(entries: int, page: int = 4096) -> int:
    """One io_uring's memory when PostgreSQL 18 puts the rings in its main segment
    (io_method = io_uring, kernel >= 6.5, built with liburing's io_uring_queue_init_mem):
    liburing's io_uring_alloc_huge sizes the submission entries (64 B each, rounded to the
    page) plus the ring header (64 B), the completion entries (16 B, twice as many) and the
    submission array (4 B each), rounded to the page; entries round up to a power of two.
    Modelled from liburing's setup.c: the wheel here has no liburing to measure it."""
    sq = 1 << max(entries - 1, 0).bit_length()
    sqes = -(-64 * sq // page) * page
    return -(-(sqes + 64 + 16 * 2 * sq + 4 * sq) // page) * page


def estimate_bytes(s: dict[str, int], major: int | None = None,
                   io_method: str = "worker") -> int:
    """Shared memory bytes for a cluster whose own binary cannot be asked (PG <= 14, or no
    binary of its major here): the per-major model above. An estimate that errs high: by
    1.5-16 MB on the grid it was fitted to, up to 58 MB at 2000 connections x 1024 locks
    (docs/reference.md); smaps after the first start gives the exact size."""
    t = shmem_terms(major)
    slots = (s["max_connections"] + autovacuum_slots(s, major) + s["max_worker_processes"]
             + s["max_wal_senders"] + s["max_prepared_transactions"])
    buffers = s["shared_buffers"] // BLCKSZ
    wal = s["wal_buffers"]
    if wal < 0:  # -1: 1/32 of shared_buffers, between 64 kB and one 16 MB WAL segment (xlog.c)
        wal = min(max(s["shared_buffers"] // 32, 64 << 10), 16 << 20)
    # The lock tables' hash buckets grow in powers of two: 1% more than the fitted cost per lock
    # covers the steps between the grid's points (checked on other settings: 18 was 2.7 MB
    # short of its own figure at 2000 connections x 1024 locks without it).
    size = (t.fixed + t.per_buffer * buffers + t.per_slot * slots
            + 1.01 * t.per_lock * s["max_locks_per_transaction"] * slots)
    if t.per_aio:
        procs = slots - s["max_prepared_transactions"] + AIO_AUX_PROCS
        conc = s.get("io_max_concurrency", -1)
        if conc < 0:  # aio_init.c AioChooseMaxConcurrency
            conc = min(max(buffers // procs, 1), 64)
        size += t.per_aio * procs * conc
        if io_method == "io_uring":  # one ring per process but the I/O workers, and a page
            size += 4096 + (procs - 32) * io_uring_ring_bytes(conc)
    return int(size) + wal + s["min_dynamic_shared_memory"] + t.margin


def size_running(inst: Instance, c: Cluster, host: HostFacts, mapping: Mapping | None) -> None:
    """The demand of a running cluster: its own count when it reports one (PG >= 15), else
    the size of its segment, else the files."""
    s = c.settings
    try:
        hps = parse_memory("huge_page_size", s.get("huge_page_size", "0"))
    except ConfError as exc:
        inst.errors.append(str(exc))
        return
    page_kb = page_kb_of(hps, host)
    if page_kb is None:
        return
    sizes = set(host.page_sizes_kb) | {page_kb}
    pages: dict[int, int] = {}
    exact = False
    source = ""
    shown = s.get("shared_memory_size_in_huge_pages", "")
    if c.origins.get("shared_memory_size_in_huge_pages") == "server" and shown.isdigit() \
            and int(shown) > 0:
        pages[page_kb] = int(shown)
        exact, source = True, "SHOW shared_memory_size_in_huge_pages"
    size_b = None
    if mapping is not None and not mapping.hugetlb:
        size_b = mapping.size_kb * 1024  # the exact segment size, page-rounded by mmap
        src2 = "size of the shared mapping in the postmaster's smaps"
    elif c.origins.get("shared_memory_size") == "server" and s.get("shared_memory_size"):
        size_b = parse_memory("shared_memory_size", s["shared_memory_size"])
        src2 = "SHOW shared_memory_size (rounded up to 1 MB)"
    elif mapping is not None:
        size_b = mapping.size_kb * 1024  # hugetlb mapping: rounded up to its page size
        src2 = "size of the huge page mapping in the postmaster's smaps"
    if size_b is None:
        if c.settings:  # from the files; never from defaults alone
            size_from_files(inst, c, host)
        return
    held = 0
    if inst.backing == "hugetlb" and mapping is not None:
        # mmap rounded the segment up to whole huge pages: exactly what it holds.
        held = pages_for(mapping.size_kb, mapping.kernel_page_kb)
        if not source and mapping.kernel_page_kb == page_kb:
            pages[page_kb] = held
            exact, source = True, "huge pages mapped by the postmaster (smaps)"
    for kb_ in sorted(sizes):
        pages.setdefault(kb_, pages_from_bytes(size_b, kb_))
    if not source:
        source, exact = src2, mapping is not None and not mapping.hugetlb
    inst.demand = Demand(inst.id, size_b, page_kb, pages, exact, source,
                         selectable=(c.major or 0) >= 14, held_pages=held)

def size_stopped(inst: Instance, c: Cluster, host: HostFacts, live: bool,
                 bindir: str | None = None, why: str = "") -> None:
    """The demand of a stopped cluster: `postgres -C` of its own major's binary (PG >= 15, on
    the live host), else the per-major estimate with the reason."""
    hps = parse_memory("huge_page_size", c.settings["huge_page_size"])
    page_kb = page_kb_of(hps, host)
    if page_kb is None:
        return
    if (c.major or 0) >= 15 and live:
        # First at the size it is configured for (its own setting: valid for its build), then
        # at the others. A build that cannot choose its page size (no MAP_HUGE_MASK at build
        # time) rejects any huge_page_size but 0: the other sizes then follow from the bytes
        # the first count covers (ceil(size / page) is at most ceil(n * page_kb / kb_)).
        # Against a shadow of the data directory, which stays untouched (preflight.py).
        with contextlib.ExitStack() as stack:
            data = stack.enter_context(shadow(c.datadir, c.owner_uid)) \
                if bindir and as_owner(c.owner_uid) is not None else None
            n, err = postgres_C(c, None, bindir, why, data)
            if n is not None:
                counts, selectable = {page_kb: n}, True
                for kb_ in sorted(set(host.page_sizes_kb) - {page_kb}):
                    got = postgres_C(c, kb_, bindir, why, data, page_size_may_fail=True)[0]
                    if got is None:
                        selectable = False
                    counts[kb_] = got if got is not None else -(-n * page_kb // kb_)
                inst.demand = Demand(inst.id, None, page_kb, counts, True,
                                     "postgres -C shared_memory_size_in_huge_pages",
                                     selectable=selectable)
                inst.settings["shared_memory_size_in_huge_pages"] = n
                return
        c.estimate_reason = err
    size_from_files(inst, c, host)


ESTIMATE_KEYS = ("shared_buffers", "wal_buffers", "min_dynamic_shared_memory", "max_connections",
                 "max_worker_processes", "max_wal_senders", "autovacuum_max_workers",
                 "max_locks_per_transaction", "max_prepared_transactions")


def estimate_values(s: dict[str, str]) -> dict[str, int]:
    """The settings estimate_bytes reads, as numbers (defaults filled in by the caller)."""
    vals = {k: (parse_memory(k, s[k]) if k in GUC_UNIT_BYTES else parse_int(k, s[k]))
            for k in ESTIMATE_KEYS}
    for k in ("io_max_concurrency", "autovacuum_worker_slots"):  # 18+ only: absent before
        if s.get(k) not in (None, ""):
            vals[k] = parse_int(k, s[k])
    return vals


def estimate_source(major: int | None, why: str) -> str:
    t = shmem_terms(major)
    return (f"estimate (a model fitted to PostgreSQL {t.measured}'s own shared_memory_size, "
            "never below it on the settings checked)" + (f": {why}" if why else ""))


def size_from_files(inst: Instance, c: Cluster, host: HostFacts) -> None:
    s = c.settings
    for k, v in DEFAULTS.items():
        s.setdefault(k, v)
    size_b = estimate_bytes(estimate_values(s), c.major, str(s.get("io_method", "worker")))
    page_kb = page_kb_of(parse_memory("huge_page_size", s["huge_page_size"]), host)
    pages = {kb_: pages_from_bytes(size_b, kb_) for kb_ in set(host.page_sizes_kb) | {page_kb}}
    why = c.estimate_reason or (
        "its version is unknown (PG_VERSION unreadable), and only PostgreSQL 15 and later "
        "report their size" if c.major is None else
        f"PostgreSQL {c.major} cannot report it" if c.major < 15 else "")
    inst.demand = Demand(inst.id, size_b, page_kb, pages, False, estimate_source(c.major, why),
                         selectable=(c.major or 0) >= 14)


def postgres_C(c: Cluster, page_kb: int | None, bindir: str | None, why: str,
               data: str | None, page_size_may_fail: bool = False) -> tuple[int | None, str]:
    """PostgreSQL's own count for a stopped cluster, as the cluster owner, from its own
    major's binary (binaries.find; `why` says why there is none), against `data`, a shadow
    of its data directory (preflight.shadow): at the page size it is configured for
    (page_kb None) or at page_kb. page_size_may_fail: a build that rejects that
    huge_page_size gives None instead of an error."""
    if bindir is None:
        return None, why
    binary = os.path.join(bindir, "postgres")
    kw = as_owner(c.owner_uid)
    if kw is None or data is None:
        return None, f"run as root or as {c.owner} to ask PostgreSQL itself"
    # -D takes the directory holding postgresql.conf: /etc/postgresql/V/NAME on Debian.
    target = os.path.dirname(c.config_file) if c.config_file else c.datadir
    # its last start's options as they were given (they outrank its files), then the shadow;
    # the last -c of a name wins (the same source, PGC_S_ARGV)
    cmd = [binary, "-D", target, *as_args(c.argv_settings, ("data_directory",)),
           "-c", f"data_directory={data}", "-C", "shared_memory_size_in_huge_pages"] + (
        ["-c", f"huge_page_size={page_kb}kB"] if page_kb else [])
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, **kw)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{binary} -C failed: {exc}"
    out = r.stdout.strip()
    if r.returncode != 0 or not out.isdigit():
        msg = next((ln for ln in r.stderr.splitlines() if "FATAL" in ln or "ERROR" in ln),
                   r.stderr.strip()[:200])
        if page_size_may_fail and "huge_page_size" in msg:
            return None, msg
        raise ConfError(f"postgres -C on {c.datadir} failed: {msg.split('  ', 1)[-1].strip()}")
    return int(out), ""

# ---- findings
