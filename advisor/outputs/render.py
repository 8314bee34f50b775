"""Output: rich tables for people, versioned JSON for pipelines (schema: docs/json-schema.md)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

from ..api.engines import SEVERITIES
from ..nextboot.boot_plan import view as boot_view
from ..facts.dists import version
from ..facts.cgroups import workload
from ..planning.plan import SCHEMA_VERSION, Report
from ..kit.knob_id import THP_FILES
from ..kit.sizing import counted, fmt_bytes, fmt_page, pool_label
from ..kit.unknown import Unknown, known

_STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "crit": "bold red"}


def _version() -> str:
    return version("hpadvise") or "unknown"


def facts_time(root: str) -> str:
    """When the facts of `root` were read, as ISO 8601 UTC: now for the live host; for a
    snapshot, when its /proc/meminfo was written (the snapshot's own time)."""
    import os
    import time
    at = time.time()
    if os.path.realpath(root) != "/":
        try:
            at = os.stat(os.path.join(root, "proc", "meminfo")).st_mtime
        except OSError:
            pass
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def to_dict(r: Report, root: str = "/") -> dict:
    h = r.host
    host = asdict(replace(h, boot=None))
    host["boot"] = boot_json(h.boot)
    host["cpu_flags"] = sorted(f for f in h.cpu_flags if f in ("pdpe1gb", "pse", "hypervisor"))
    host["thp"]["enabled"] = asdict(h.thp.enabled)
    host["default_hugepage_kb"] = h.default_hugepage_kb
    host["runtime_allocatable_pages"] = {
        str(p.size_kb): h.runtime_allocatable_pages(p.size_kb) for p in h.pools}
    host["thp"]["mthp"] = {str(k): v for k, v in h.thp.mthp.items()}
    host.pop("notes", None)
    instances = []
    for i in r.instances:
        d = {k: getattr(i, k) for k in ("engine", "id", "label", "running", "pid", "owner")}
        d["version"] = version_json(i)
        d.update((k, getattr(i, k)) for k in ("backing", "backing_page_kb", "page_tables_kb",
                                              "page_tables_huge_kb", "settings"))
        d["cgroup"] = [dict(asdict(c), workload=workload(c.cgroup)) for c in i.cgroup]
        d["memory_limit"] = asdict(i.memory_limit) if i.memory_limit else None
        d["cgroup_from"] = i.cgroup_from
        d["found"] = i.found
        d["numa_binding"] = i.numa_binding
        d["thp_mode"] = i.thp_mode
        d["thp_unadvised_kb"] = i.thp_unadvised_kb
        d["thp_regions"] = [asdict(g) for g in i.thp_regions]
        d["demand"] = None
        if i.demand:
            d["demand"] = asdict(i.demand)
            d["demand"]["pages"] = {str(k): v for k, v in i.demand.pages.items()}
        instances.append(d)
    counts = {s: sum(f.severity == s for f in r.findings) for s in SEVERITIES}
    return {
        "schema_version": SCHEMA_VERSION,
        "hpadvise_version": _version(),
        "checked_at": facts_time(root),
        "profile": {"name": r.profile.name, "source": r.profile.path},
        "host": host,
        "instances": instances,
        "findings": [asdict(f) for f in r.findings],
        "plan": {
            "pools": [dict(asdict(p), target_pages=p.target_pages, target_bytes=p.target_bytes)
                      for p in r.pools],
            "placements": [asdict(p) for p in r.placements.values()],
            "unused_pages": {str(k): v for k, v in r.unused_pages.items()},
            "changes": [change_json(c) for c in r.changes],
            "blocked": r.blocked,
            "boot": boot_view(r),
        },
        "summary": {"worst": r.worst(), "counts": counts},
        "notes": r.notes,
        "errors": r.errors,
    }


def _cg(c) -> str:
    """One hugetlb limit as `check` shows it."""
    lim = "unlimited" if c.limit_bytes is None else fmt_bytes(c.limit_bytes)
    rsvd = "unlimited" if c.rsvd_limit_bytes is None else fmt_bytes(c.rsvd_limit_bytes)
    hits = f", hit {c.max_events}x" if c.max_events else ""
    who = workload(c.cgroup)
    return f"v{c.version} {c.cgroup}{f' ({who})' if who else ''} {c.size}: faults {lim}, " \
           f"reservations {rsvd}{hits}"


def boot_json(b) -> dict | None:
    """The boot sources as the JSON says them: each knob by its key."""
    if b is None:
        return None
    d = asdict(replace(b, setters=[], tuned_units={}))
    d["setters"] = [{"knob": s.knob.key, "value": s.value, "source": s.source,
                     "stage": s.stage, "ordered": s.ordered} for s in b.setters]
    d["tuned_units"] = {k.key: [list(u) for u in v] for k, v in b.tuned_units.items()}
    return d


def change_json(c) -> dict:
    """A change as the JSON says it: its knob by `size_kb` and `knob`, not by the KnobId code
    passes around (`Change.id`)."""
    d = asdict(c)
    del d["id"]
    return d


def to_json(r: Report, root: str = "/") -> str:
    return json.dumps(to_dict(r, root), indent=2, default=str)


def _kb(v: int | None) -> str:
    return fmt_bytes(v * 1024) if v is not None else "unknown"


def _limit(v: str | None) -> str:
    return fmt_bytes(int(v)) if v and v.isdigit() else _n(v)


def _n(v) -> str:
    """A fact for a table cell: "unknown" where it was not read (the finding or the JSON says
    why), never "None" or "?"."""
    return str(v) if known(v) else "unknown"


def version_json(i) -> str | dict:
    """An instance's release for the JSON: the string, or the unknown object saying why it was
    not read and what supplies it."""
    if known(i.version):
        return i.version
    u = i.version if isinstance(i.version, Unknown) else Unknown(
        f"the release of {i.id}", "not read for this instance (a server not reached, or one "
        "only named or recalled from an apply's journal)")
    return u.as_json()


REGION_LABEL = {"anonymous": "private anonymous", "shared": "shared (shmem)",
                "hugetlb": "static huge pages"}
ADVICE_LABEL = {"madvise": ", madvise()d", "nohuge": ", MADV_NOHUGEPAGE", "none": ""}


def _sizes(g, kbs: tuple[int, ...]) -> str:
    if g.kind == "hugetlb":
        return "-"
    return ", ".join(fmt_page(k) for k in kbs) or "none"


def render(r: Report, console, verbose: bool = False) -> None:
    from rich import box
    from rich.markup import escape  # facts such as "TuneD [vm] ..." are not markup
    from rich.table import Table

    # Instance IDs are what --instance takes: never cut, never broken across lines.
    id_width = max((len(i.id) for i in r.instances), default=2)

    def table(title: str, *cols: str) -> Table:
        t = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                  expand=True)
        for c in cols:
            if c == "id":
                t.add_column(c, no_wrap=True, min_width=id_width)
            else:  # long words fold rather than end in an ellipsis
                t.add_column(c, overflow="fold")
        return t

    h, m = r.host, r.host.mem
    t = table("Host", "fact", "value")
    t.add_row("kernel", _n(h.kernel))
    t.add_row("memory", f"{_kb(m.total_kb)} total, {_kb(m.available_kb)} available")
    t.add_row("commit", f"Committed_AS {_kb(m.committed_as_kb)} of CommitLimit "
                        f"{_kb(m.commit_limit_kb)} (overcommit_memory="
                        f"{_n(h.sysctls.get('vm.overcommit_memory'))}, ratio "
                        f"{_n(h.sysctls.get('vm.overcommit_ratio'))})")
    t.add_row("page tables", _kb(m.page_tables_kb))
    t.add_row("hugetlb", f"{_kb(m.hugetlb_kb)} in pools (all sizes); base page "
                         f"{h.base_page_bytes // 1024} KiB, default huge page "
                         f"{fmt_page(h.default_hugepage_kb) if h.default_hugepage_kb else 'unknown'}")
    # x86's flags where the CPU has them (cpuinfo's "flags"; arm64 lists "Features"), then the
    # sizes the kernel offers, which is what counts everywhere
    x86 = f"1 GiB pages (pdpe1gb): {'yes' if 'pdpe1gb' in h.cpu_flags else 'no'}, " \
        f"2 MiB (pse): {'yes' if 'pse' in h.cpu_flags else 'no'}; " \
        if h.cpu_flags & {"pse", "pdpe1gb"} else ""
    sizes = ", ".join(fmt_page(k) for k in sorted(h.page_sizes_kb)) or "none"
    t.add_row("cpu", f"{x86}huge pages offered: {sizes}; NUMA nodes: "
                     f"{len(h.numa_nodes) or 'unknown'}")
    where = None
    if h.in_container:
        where = "inside a container: " + ", ".join(h.container_evidence)
    elif h.container:
        where = (f"{h.container} marker file, but the host's processes are visible: "
                 "read as the host")
    t.add_row("platform", ", ".join(x for x in (h.virtualization, where) if x)
              or "no virtualization seen")
    t.add_row("memlock", f"soft {_limit(h.memlock_soft)}, hard {_limit(h.memlock_hard)} "
                         "(this process; engines that need it check their own)")
    t.add_row("hugetlbfs", ", ".join(f"{x.target} ({x.options})" for x in h.hugetlbfs_mounts)
              or "not mounted (not needed for MAP_HUGETLB users)")
    cmd = " ".join(f"{k}={v}" for k, v in h.cmdline_params)
    t.add_row("cmdline", cmd or "no hugepage/THP parameters")
    if h.cgroup_hugetlb:
        t.add_row("cgroup", "hpadvise's own: " + "; ".join(_cg(c) for c in h.cgroup_hugetlb))
    console.print(t)

    t = table("Pools", "page size", "total", "free", "reserved", "surplus", "overcommit",
              "per node (total/free)", "free blocks now")
    for p in h.pools:
        nodes = " ".join(f"n{n.node}:{_n(n.nr_pages)}/{_n(n.free_pages)}" for n in p.nodes)
        t.add_row(fmt_page(p.size_kb), _n(p.nr_pages), _n(p.free_pages), _n(p.resv_pages),
                  _n(p.surplus_pages), _n(p.overcommit_pages), nodes or "-",
                  "-" if h.is_gigantic(p.size_kb) else _n(h.runtime_allocatable_pages(p.size_kb)))
    console.print(t)

    th = h.thp
    t = table("THP", "knob", "value")
    for f in THP_FILES:
        t.add_row(f, _n(getattr(th, f).value))
    t.add_row("khugepaged", ", ".join(f"{k}={_n(v)}" for k, v in th.khugepaged.items()))
    if th.mthp:
        groups: dict[str, list[str]] = {}
        for k, v in th.mthp.items():
            key = f"enabled={v.get('enabled') or '-'} shmem={v.get('shmem_enabled') or '-'}"
            groups.setdefault(key, []).append(fmt_page(k))
        t.add_row("mTHP sizes", "\n".join(f"{', '.join(sizes)}: {key}"
                                          for key, sizes in groups.items()))
    counters = {k: v for k, v in h.vmstat.items()
                if k in ("thp_fault_alloc", "thp_fault_fallback", "thp_collapse_alloc",
                         "compact_stall", "compact_fail", "compact_success") and v}
    t.add_row("counters", ", ".join(f"{k}={v}" for k, v in counters.items()) or "all zero")
    console.print(t)

    view = boot_view(r)
    if view:
        t = table("Now, at next boot, planned", "knob", "now", "at next boot (set by)", "plan")
        for k in view:
            t.add_row(k["name"], _n(k["now"]), escape(f"{_n(k['at_boot'])} ({k['source']})"),
                      _n(k["plan"]) if k["plan"] is not None else "-")
        console.print(t)
        for note in r.host.boot.notes if verbose else ():
            console.print(f"  [dim]boot: {escape(note)}[/dim]")

    t = table("Instances", "id", "version", "owner", "state", "shared memory on", "needs",
              "page tables (now -> huge)")
    for i in r.instances:
        need = "unknown"
        place = r.placements.get(i.id)
        if place is not None and place.status == "thp":
            need = "no pool (THP)"
        elif i.demand:
            d = i.demand
            at = d.split or {d.page_kb: d.pages.get(d.page_kb, 0)}
            need = " + ".join(f"{n} x {fmt_page(k)}" for k, n in sorted(at.items(), reverse=True)
                              ) + ("" if d.exact else " (estimate)")
        pt = "-"
        if i.page_tables_kb is not None:
            pt = _kb(i.page_tables_kb) + (f" -> ~{_kb(i.page_tables_huge_kb)}"
                                          if i.page_tables_huge_kb is not None else "")
        backing = {"hugetlb": "huge pages", "thp": "partly THP",
                   "4k": "4 KiB pages"}.get(i.backing or "", "unknown")
        if i.backing == "hugetlb" and i.backing_page_kb:
            backing += f" ({fmt_page(i.backing_page_kb)})"
        t.add_row(i.id, _n(i.version).split(" ")[0], _n(i.owner),
                  "running" if i.running else "stopped",
                  backing if i.running else "-", need, pt)
    if r.instances:
        console.print(t)
    regions = [i for i in r.instances if i.thp_regions]
    if regions:
        t = table("THP by memory (main process)", "id", "memory", "mapped", "on huge pages",
                  "THP sizes now", "after the plan")
        for i in regions:
            for g in i.thp_regions:
                t.add_row(i.id, REGION_LABEL[g.kind] + ADVICE_LABEL[g.advice], _kb(g.size_kb),
                          _kb(g.huge_kb), _sizes(g, g.sizes_now), _sizes(g, g.sizes_planned))
        console.print(t)
    limited = [i for i in r.instances if i.cgroup or i.memory_limit]
    if limited:
        t = table("Cgroup limits", "id", "huge pages (tightest on the way to the root)",
                  "memory")
        for i in limited:
            t.add_row(i.id, "; ".join(_cg(c) for c in i.cgroup) or "unlimited",
                      fmt_bytes(i.memory_limit.limit_bytes) if i.memory_limit else "unlimited")
        console.print(t)

    order = {s: n for n, s in enumerate(reversed(SEVERITIES))}
    t = table("Findings", "", "finding", "why / evidence / source")
    for f in sorted(r.findings, key=lambda f: order[f.severity]):
        why = escape(f.rationale)
        if f.evidence:
            why += f"\n[dim]evidence: {escape(f.evidence)}[/dim]"
        if f.source and verbose:
            why += f"\n[dim]source: {escape(f.source)}[/dim]"
        title = escape(f.title) + (f"\n[dim]{escape(f.instance)}[/dim]" if f.instance else "")
        t.add_row(f"[{_STYLE[f.severity]}]{f.severity}[/]", title, why)
    console.print(t)

    t = table("Plan", "change", "now", "recommended", "why")
    for c in r.changes:
        rec = str(c.recommended)
        if c.kind == "pool":
            rec += f" ({fmt_bytes(c.recommended * c.size_kb * 1024)})"
        t.add_row(c.target + (f" ({c.instance})" if c.instance and c.kind == "setting" else ""),
                  _n(c.current), rec + (" (restart)" if c.restart else ""),
                  c.reason + (f"; not hpadvise's to change: {c.blocked}" if c.blocked
                              else ""))
    for p in r.pools:
        if p.current_pages == p.target_pages:
            t.add_row(pool_label(p.size_kb), _n(p.current_pages),
                      f"{p.target_pages} (already)", "")
    if r.changes or r.pools:
        console.print(t)
    else:
        console.print("[bold]Plan[/bold]: nothing to change.")
    for p in r.placements.values():  # never silently: what the plan could not count
        if p.status == "unsized":
            console.print(f"[bold yellow]not in the plan:[/] {p.instance}: {p.reason}")
    for b in r.blocked:
        console.print(f"[bold red]blocked:[/] {b}")
    if r.notes and verbose:
        console.print("[dim]notes:[/dim]")
        for n in r.notes:
            console.print(f"  [dim]{n}[/dim]")
    elif r.notes:
        console.print(f"[dim]{counted(len(r.notes), 'note')}: files that could not be read, servers "
                      "left out; --verbose lists them.[/dim]")
