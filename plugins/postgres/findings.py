"""PostgreSQL findings and the setting changes the plan asks of a cluster.

- huge_pages=try falls back to normal pages logging only at DEBUG1 (src/backend/port/
  sysv_shmem.c, CreateAnonymousSharedMemory), so the backing is read from the postmaster's smaps.
- The main segment is shared anonymous memory: THP reaches it through shmem_enabled, not
  enabled (Documentation/admin-guide/mm/transhuge.rst).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from hpadvise.api.face import (Change, Code, Codes, Finding, HostFacts, HUGETLBPAGE, Instance,
                               Profile, TRANSHUGE, fmt_bytes, fmt_page)

from .conf import DOCS, SHMEM_GUCS, ConfError, parse_memory
from .sizing import page_kb_of

if TYPE_CHECKING:
    from .state import Cluster

CODES = Codes(
    Code("pg.huge_page_size.unsupported", "crit", "huge_page_size is not offered by this host",
         f"{HUGETLBPAGE}; /sys/kernel/mm/hugepages"),
    Code("pg.shared_memory_type.sysv", "crit", "huge_pages=on with shared_memory_type=sysv",
         "src/backend/port/sysv_shmem.c"),
    Code("pg.huge_pages.active", "ok", "Shared memory is on huge pages", DOCS),
    Code("pg.huge_pages.try", "warn", "huge_pages = try", DOCS),
    Code("pg.huge_pages.fallback", "crit", "huge_pages = try fell back to normal pages silently",
         DOCS),
    Code("pg.huge_pages.off", "warn", "huge_pages = off", DOCS),
    Code("pg.backing.unknown", "info", "Cannot tell whether shared memory is on huge pages", DOCS),
    Code("pg.thp.shmem", "info", "Part of shared memory is on shmem THP", TRANSHUGE),
    Code("pg.thp.enabled_not_shmem", "info",
         "THP enabled=always does not reach PostgreSQL's shared buffers", TRANSHUGE),
    Code("pg.page_tables", "info", "Page tables now and on huge pages",
         "Documentation/filesystems/proc.rst (VmPTE); docs/reference.md (page tables)"),
    Code("pg.managed", "info", "A cluster manager runs it: its parameters and restarts go "
         "through the manager", "Patroni docs: Dynamic Configuration Settings; patronictl"),
    Code("pg.pending_restart", "warn", "Shared-memory settings wait for a restart",
         "pg_settings.pending_restart"),
    Code("pg.setting.elsewhere", "warn", "A setting the plan needs comes from where "
         "hpadvise does not change it", "PostgreSQL docs, 20.1 Setting Parameters; Patroni "
         "docs, Dynamic Configuration Settings"),
    Code("pg.config.broken", "crit", "The configuration files have errors: the server would "
         "not start again", "pg_file_settings; postgres -C (PostmasterMain)"),
    Code("pg.demand.estimate", "info", "Page count is an estimate", DOCS),
    Code("pg.not_local", "info", "Server is not running on this host"),
    Code("pg.no_connection", "info", "Settings read from the configuration files"),
    Code("pg.unreadable", "info", "Cannot size this instance as this user"),
)


def findings(inst: Instance, c: Cluster, host: HostFacts) -> list[Finding]:
    f: list[Finding] = []
    iid = inst.id
    if c.manager is not None:
        f.append(CODES["pg.managed"](
            "Its parameters live in the manager's configuration and reach every member from "
            "there; ALTER SYSTEM does not, and a restart behind the manager's back can make it "
            "restart the server itself or fail over. apply goes through it: the parameters "
            "into Patroni's configuration (REST PATCH /config), the restarts by Patroni (POST "
            "/restart), replicas before the leader.",
            f"parent process: {c.manager.config or 'patroni'}", iid,
            title=f"{iid} is managed by {c.manager.describe()}"))
    hp = c.settings.get("huge_pages", "try")
    try:
        hps = parse_memory("huge_page_size", c.settings.get("huge_page_size", "0"))
    except ConfError:
        hps = 0
    want_kb = page_kb_of(hps, host)
    if hps and want_kb not in host.page_sizes_kb:
        offered = ", ".join(fmt_page(k) for k in host.page_sizes_kb) or "none"
        f.append(CODES["pg.huge_page_size.unsupported"](
            "PostgreSQL accepts any value here, but the kernel only maps the sizes it has "
            f"pools for. Offered: {offered}.", f"huge_page_size={c.settings['huge_page_size']}",
            iid, title=f"huge_page_size = {c.settings['huge_page_size']} is not offered by "
                       "this host"))
    if c.settings.get("shared_memory_type") == "sysv" and hp == "on":
        f.append(CODES["pg.shared_memory_type.sysv"](
            "PostgreSQL supports huge pages only for mmap shared memory and refuses to start.",
            "shared_memory_type=sysv", iid))
    if inst.running and inst.pid:
        seg = c.shm_mapping.path if c.shm_mapping else "its mapping not named"
        # PostgreSQL 17+ says itself whether it got them (huge_pages_status: on, off, or
        # unknown before shared memory exists; "Preset Options"): beside smaps, its word.
        status = c.settings.get("huge_pages_status")
        said = f"; huge_pages_status = {status}" if status else ""
        if inst.backing == "hugetlb":
            on = hp == "on"
            f.append(CODES["pg.huge_pages.active" if on else "pg.huge_pages.try"](
                "Running on huge pages now." if on else
                "With try, a restart that finds the pool short falls back to 4 KiB pages "
                "silently (logged only at DEBUG1). Set huge_pages = on so it fails loudly.",
                f"smaps: {seg}, KernelPageSize {inst.backing_page_kb} kB{said}", iid,
                title=f"Shared memory is on {fmt_page(inst.backing_page_kb)} huge pages"
                + ("" if on else ", but huge_pages = try")))
        elif inst.backing in ("4k", "thp") and hp == "try":
            f.append(CODES["pg.huge_pages.fallback"](
                "PostgreSQL asked for huge pages, did not get them, and logged it only at "
                "DEBUG1. Every backend now builds its own page tables for shared memory.",
                f"smaps: {seg} on {'THP' if inst.backing == 'thp' else '4 KiB'} pages{said}",
                iid))
        elif inst.backing in ("4k", "thp") and hp == "off":
            f.append(CODES["pg.huge_pages.off"](
                "Shared memory is on normal pages; huge pages cut page-table memory and TLB "
                "misses (`hpadvise validate` measures what they are worth on this host).",
                "huge_pages=off", iid))
        elif inst.backing is None and c.observe_note:
            f.append(CODES["pg.backing.unknown"](c.observe_note, "", iid))
        if inst.backing == "thp" and c.shm_mapping is not None:
            m = c.shm_mapping
            f.append(CODES["pg.thp.shmem"](
                "PostgreSQL's shared memory is shared anonymous memory: THP reaches it "
                "through shmem_enabled, not enabled. It is not reserved, so it can be "
                "split, compacted or refused at any time.",
                f"ShmemPmdMapped {fmt_bytes(m.shmem_pmd_kb * 1024)} of "
                f"{fmt_bytes(m.size_kb * 1024)}", iid))
    elif not inst.running and hp != "on":
        f.append(CODES[f"pg.huge_pages.{hp}"](
            "Set huge_pages = on so that a short pool is an error at start, not a silent "
            "fallback to 4 KiB pages.", f"huge_pages={hp} ({c.origins.get('huge_pages')})", iid))
    if inst.backing != "hugetlb" and host.thp.enabled.value == "always" \
            and host.thp.shmem_enabled.value in ("never", "deny", None):
        f.append(CODES["pg.thp.enabled_not_shmem"](
            "enabled governs private anonymous memory (backends' work_mem); shared memory "
            "follows shmem_enabled, which is never here.",
            f"enabled={host.thp.enabled.value}, shmem_enabled={host.thp.shmem_enabled.value}",
            iid))
    if inst.page_tables_kb is not None and inst.page_tables_huge_kb is not None \
            and inst.backing != "hugetlb":
        f.append(CODES["pg.page_tables"](
            "Each backend maps shared memory with its own page tables: ~2 MiB per GiB "
            "touched on 4 KiB pages.", f"VmPTE over {inst.settings.get('processes')} processes",
            iid, title=f"Page tables: {fmt_bytes(inst.page_tables_kb * 1024)} now, "
                       f"~{fmt_bytes(inst.page_tables_huge_kb * 1024)} on huge pages"))
    why = held_back(c)
    if why:
        f.append(CODES["pg.setting.elsewhere"](
            "The plan reserves no pages for it and restarts nothing of it: nothing apply can "
            "change would put it on huge pages. " + why[0].upper() + why[1:] + ".",
            c.layers["huge_pages"].where if "huge_pages" in c.layers else "", iid,
            title=f"{iid} stays off huge pages: not planned"))
    shm_pending = [g for g in c.pending_restart if g in SHMEM_GUCS + ("huge_pages",)]
    if shm_pending:
        f.append(CODES["pg.pending_restart"](
            "The page count reflects what the server runs with now, not the changed "
            "settings. Restart it, or stop it and run check --pgdata, to size for them.",
            ", ".join(shm_pending), iid))
    if inst.demand and not inst.demand.exact:
        f.append(CODES["pg.demand.estimate"](inst.demand.source, "", iid))
    return f


def changes(inst: Instance, c: Cluster, page_kb: int | None, host: HostFacts,
            profile: Profile) -> list[Change]:
    """The settings changes the plan needs (_changes), each marked blocked where the layer
    that wins is not hpadvise's to change (layers.py): the plan then says where and what to
    change, and apply makes none of it."""
    if held_back(c):  # nothing of it would take: nothing is planned (findings say why)
        return []
    out = []
    for ch in _changes(inst, c, page_kb, host, profile):
        lay = c.layers.get(ch.target)
        if lay is not None and not lay.changeable:
            ch = dataclasses.replace(ch, blocked=f"{ch.target} comes from {lay.where}; "
                                                 f"{lay.how}")
        out.append(ch)
    return out


def held_back(c: Cluster) -> str | None:
    """huge_pages = off where hpadvise does not change it: the server will not take huge
    pages whatever apply does. A cluster manager's cluster changes all at once: one member
    held back holds back every member (c.peer_held_back)."""
    lay = c.layers.get("huge_pages")
    if lay is not None and not lay.changeable and c.settings.get("huge_pages") == "off":
        return (f"huge_pages = off comes from {lay.where}, which hpadvise does not change: "
                f"{lay.how}")
    return c.peer_held_back


def _changes(inst: Instance, c: Cluster, page_kb: int | None, host: HostFacts,
             profile: Profile) -> list[Change]:
    """huge_pages as the profile wants it (on: fail at start rather than fall back) and
    huge_page_size for the page size the plan chose (0 = the kernel's default size). Without
    a page size (its cgroup cannot hold the pages): huge_pages = off, since try maps them and
    dies at the first touch past a fault limit."""
    out = []
    if page_kb is None:
        if c.settings.get("huge_pages") != "off":
            out.append(Change("setting", "huge_pages", c.settings.get("huge_pages"), "off",
                              "its cgroup cannot hold its huge pages", inst.id, restart=True))
        return out
    want = profile.engine("postgres").get("huge_pages", "on")
    if c.settings.get("huge_pages") != want:
        out.append(Change("setting", "huge_pages", c.settings.get("huge_pages"), want,
                          "fail at start instead of falling back silently" if want == "on"
                          else "profile", inst.id, restart=True))
    cur = c.settings.get("huge_page_size", "0")
    try:
        cur_kb = page_kb_of(parse_memory("huge_page_size", cur), host)
    except ConfError:
        cur_kb = None
    if cur_kb != page_kb or (cur not in ("0", "0kB") and
                             parse_memory("huge_page_size", cur) // 1024
                             not in host.page_sizes_kb):
        new = "0" if page_kb == host.default_hugepage_kb else \
            ("1GB" if page_kb == 1048576 else f"{page_kb}kB")
        out.append(Change("setting", "huge_page_size", cur, new,
                          f"use {fmt_page(page_kb)} pages", inst.id, restart=True))
    return out
