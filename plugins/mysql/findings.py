"""MySQL/MariaDB findings and the setting change the plan asks of a server.

- MariaDB >= 10.6.17 switches THP off for itself (prctl PR_SET_THP_DISABLE, MDEV-33279):
  /proc/PID/status then reads "THP_enabled: 0".
- SysV shared memory (shmget SHM_HUGETLB) for large pages needs the server's group in
  vm.hugetlb_shm_group or RLIMIT_MEMLOCK over the segment (MySQL 5.7 manual, 8.12.3.3 Enabling
  Large Page Support): MySQL < 8.0 and MariaDB < 10.5 put everything there, MySQL's key cache
  still goes there (versions.py); mmap needs neither (measured: ulimit -l 0 works).
"""

from __future__ import annotations

import dataclasses

from typing import TYPE_CHECKING

from hpadvise.api.face import (Change, Code, Codes, Finding, HostFacts, Instance, Profile,
                               TRANSHUGE, fmt_bytes, fmt_page)

from .conf import DOCS, OptionFileError, parse_size
from .sizing import bool_on, chunk_fallback
from .versions import model

if TYPE_CHECKING:
    from .state import Server

SYSV_DOCS = "MySQL 5.7 manual, 8.12.3.3 Enabling Large Page Support"

CODES = Codes(
    Code("my.no_innodb", "info", "InnoDB is not loaded", "information_schema.ENGINES"),
    Code("my.large_pages.fallback", "crit", "large_pages = ON fell back to normal pages",
         "mysys/my_largepage.c (continuing to smaller size)"),
    Code("my.large_pages.no_sizes", "crit", "The server cannot see the huge page sizes: no "
         "large pages at all", "mysys/my_largepage.c my_get_large_page_sizes"),
    Code("my.large_pages.active", "ok", "Buffers on huge pages", DOCS),
    Code("my.large_pages.off", "warn", "large_pages = OFF", DOCS),
    Code("my.log.unreadable", "info", "Cannot read the error log", DOCS),
    Code("my.thp.disabled_by_server", "info", "The server turned THP off for itself",
         "MDEV-33279"),
    Code("my.thp.anon", "info", "Part of the server's memory is on THP", TRANSHUGE),
    Code("my.sysv_shm", "warn", "This version takes large pages through SysV shared memory",
         SYSV_DOCS, ("info",)),
    Code("my.setting.elsewhere", "warn", "large_pages comes from where hpadvise does not "
         "change it", "MySQL Reference Manual, 6.2.2.2 Using Option Files and 5.1.9.3 "
         "Persisted System Variables"),
    Code("my.config.broken", "crit", "The option files have errors: the server would not "
         "start again", "mysqld --help --verbose"),
    Code("my.pending_restart", "warn", "Option files differ from the running server",
         "my.cnf vs SHOW GLOBAL VARIABLES"),
    Code("my.demand.estimate", "info", "Page count is an estimate", DOCS),
    Code("my.not_local", "info", "Server is not running on this host"),
    Code("my.no_connection", "info", "Settings read from the option files"),
)

# Settings whose value at the next start changes the page count or large_pages itself.
SIZED = ("large_pages", "innodb_buffer_pool_size", "innodb_log_buffer_size", "key_buffer_size",
         "aria_pagecache_buffer_size")


def findings(inst: Instance, s: Server, host: HostFacts) -> list[Finding]:
    f: list[Finding] = []
    iid = inst.id
    lp = bool_on(s.settings.get("large_pages"))
    fallback = s.fallback or []
    huge = s.huge_maps
    d = inst.demand
    why = held_back(s)
    if why:
        f.append(CODES["my.setting.elsewhere"](
            "The plan reserves no pages for it and restarts nothing of it: nothing apply can "
            "change would put it on huge pages. " + why[0].upper() + why[1:] + ".",
            s.layers["large_pages"].where, iid, title=f"{iid} stays off huge pages: not "
                                                      "planned"))
    if s.settings.get("innodb", "ON").upper() == "OFF":
        f.append(CODES["my.no_innodb"](
            "No buffer pool to place on huge pages; only the MyISAM/Aria caches count.", "",
            iid))
    if inst.running and s.pid:
        held_kb = sum(m.size_kb for m in huge)
        # what must be on huge pages: the allowance may or may not be mapped
        want_kb = s.required_pages * d.page_kb if d else 0
        # Chunks are mapped one way (mmap, or SysV before MySQL's allocator rework): where any
        # is on anonymous huge pages, a SysV segment is the key cache, not a chunk.
        anon = [mp for mp in huge if not mp.path.startswith("/SYSV")]
        chunks = chunk_fallback(s.allocations, [mp.size_kb for mp in (anon or huge)],
                                fallback) if lp and s.pid else None
        if lp and s.sizes_hidden:
            f.append(CODES["my.large_pages.no_sizes"](
                f"The server learns the huge page sizes from {s.sizes_hidden} at start, which "
                "its root does not show: it maps nothing on huge pages, whatever the pool holds, "
                "and logs nothing. Make it visible there (mount /sys, read-only, in the "
                "container or root) and restart it.",
                f"{s.sizes_hidden}: missing in the root {s.root.describe()}", iid))
        if lp and (fallback or (inst.backing is not None and held_kb < want_kb)):
            ev = fallback[-1].strip()[-200:] if fallback else \
                f"smaps: {fmt_bytes(held_kb * 1024)} on huge pages of " \
                f"{fmt_bytes(want_kb * 1024)} expected"
            title = None
            if chunks and chunks[1] < chunks[0]:
                # Each chunk is mapped, and falls back, on its own: say how many did.
                n, ok, logged = chunks
                title = f"{n - ok} of {n} buffer pool chunks fell back to 4 KiB pages"
                ev = f"smaps: {ok} chunk mappings on huge pages of {n}; error log: {logged} " \
                    f"chunk-sized allocation warnings" + (f"; last: {ev}" if fallback else "")
            f.append(CODES["my.large_pages.fallback"](
                "The server could not map some buffers on huge pages and carried on with "
                "4 KiB pages, logging only a warning. Size the pool with the count below "
                "and restart.", ev, iid, title=title))
        elif lp and huge:
            f.append(CODES["my.large_pages.active"](
                "Running on huge pages now.",
                f"smaps: {fmt_bytes(held_kb * 1024)} in /anon_hugepage mappings", iid,
                title=f"{len(huge)} buffers on {fmt_page(inst.backing_page_kb)} huge pages"))
        elif not lp:
            f.append(CODES["my.large_pages.off"](
                "The buffer pool is on 4 KiB pages: more TLB misses and page-table memory. "
                "Set large_pages = ON with a pool of the size below.",
                f"large_pages={s.settings.get('large_pages', 'OFF')} "
                f"({s.origins.get('large_pages', 'default')})", iid))
        if s.fallback is None and lp and inst.backing != "hugetlb":
            f.append(CODES["my.log.unreadable"](
                "The fallback warning goes only to the error log.",
                str(s.log_error or "log_error not set (stderr)"), iid))
        if s.thp_enabled == "0":
            f.append(CODES["my.thp.disabled_by_server"](
                "MariaDB >= 10.6.17 calls prctl(PR_SET_THP_DISABLE) after allocating its "
                "buffers, whatever the host's THP setting.", "/proc/PID/status THP_enabled: 0",
                iid))
        elif (s.anon_huge_kb or 0) > 0:
            f.append(CODES["my.thp.anon"](
                "THP pages are not reserved; khugepaged and compaction work to keep them, "
                "which MySQL and MariaDB advise against for latency.",
                f"AnonHugePages {fmt_bytes(s.anon_huge_kb * 1024)}", iid))
    m = model(s.flavour, s.vt)
    seen = [mp for mp in huge if mp.path.startswith("/SYSV")]  # what the running server did
    key_cache = lp and m.has("key_cache_sysv") and \
        any(a.what.startswith("key cache") for a in s.allocations)
    if m.sysv or seen or key_cache:
        gid = host.sysctls.get("vm.hugetlb_shm_group")
        what = "its large pages" if m.sysv or len(seen) > 1 else "its key cache's large pages"
        c = inst.shm_cred  # its process's groups and capability (the core reads them)
        admitted = c is not None and (c.ipc_lock or gid in c.groups)
        f.append(CODES["my.sysv_shm"](
            f"SysV shared memory on huge pages ({what}) is refused unless the server has "
            "CAP_IPC_LOCK or its group is vm.hugetlb_shm_group (Linux hugetlbfs, SHM_HUGETLB; "
            "a memory-lock limit no longer admits it); it then falls back to normal pages. "
            + ("Its process is admitted now." if admitted else "Its process is not admitted "
               "now: check's plan sets the group where it can (kernel.hugetlb_shm_group)."),
            f"vm.hugetlb_shm_group = {'unknown' if gid is None else gid}"
            + (f"; {len(seen)} SysV huge page segments mapped" if seen else ""), iid,
            severity="info" if admitted else "warn"))
    if inst.running and s.next_start is not None:
        pending = []
        for k in SIZED:
            if s.origins.get(k) != "server" or k not in s.next_start:
                continue
            now, nxt = s.settings[k], s.next_start[k]
            if k == "large_pages":
                same = bool_on(now) == bool_on(nxt)
            else:
                try:
                    same = parse_size(k, now) == parse_size(k, nxt)
                except OptionFileError:
                    same = False
            if not same:
                pending.append(f"{k}: {now} now, {nxt} at the next start")
        if pending:
            f.append(CODES["my.pending_restart"](
                "The page count reflects what the server runs with now; the next start "
                "uses the option files. Restart it to size for them.", "; ".join(pending), iid))
    if d and not d.exact:
        f.append(CODES["my.demand.estimate"](d.source, "", iid))
    return f


def held_back(s: Server) -> str | None:
    """large_pages off where hpadvise does not change it (the command line, SET PERSIST):
    the server will not take huge pages whatever apply does."""
    lay = s.layers.get("large_pages")
    src = s.next_start if s.next_start is not None else s.settings
    if lay is not None and not lay.changeable and not bool_on(src.get("large_pages")):
        return f"large_pages = OFF comes from {lay.where}, which hpadvise does not " \
               f"change: {lay.how}"
    return None


def changes(inst: Instance, s: Server, profile: Profile, huge: bool = True) -> list[Change]:
    """large_pages as the profile wants it (OFF when its cgroup cannot hold the pages: `huge`
    False), judged on what the next start gets (the option files), not what the server runs
    with now: an edited file awaiting a restart must not hide a needed change. Blocked where
    the layer that wins is not hpadvise's to change (layers.py); nothing where it stays off
    whatever apply does."""
    if held_back(s):
        return []
    lay = s.layers.get("large_pages")
    return [dataclasses.replace(ch, blocked=f"large_pages comes from {lay.where}; {lay.how}")
            if lay is not None and not lay.changeable else ch
            for ch in _changes(inst, s, profile, huge)]


def _changes(inst: Instance, s: Server, profile: Profile, huge: bool = True) -> list[Change]:
    want = profile.engine("mysql").get("large_pages", "ON") if huge else "OFF"
    src = s.next_start if s.next_start is not None else s.settings
    cur = "ON" if bool_on(src.get("large_pages")) else "OFF"
    if cur != want:
        why = "put the buffer pool on the reserved huge pages" if want == "ON" and huge else \
            ("its cgroup cannot hold its huge pages" if not huge else "profile")
        if want == "ON" and model(s.flavour, s.vt).single_pool:
            # Measured on 10.11.19: SET GLOBAL innodb_buffer_pool_size then fails (ERROR 1621).
            why += "; the buffer pool's size is then fixed until a restart (no online resize)"
        return [Change("setting", "large_pages", cur, want, why, inst.id, restart=True)]
    return []
