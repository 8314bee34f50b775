"""`hpadvise report`: many hosts' `check --json` outputs or snapshots in one table, worst first.

Each host is read from what `check` writes (a JSON file, schema_version 1) or from a snapshot
directory (`hpadvise snapshot`), which is checked here the same way; a directory that is
neither is searched one level deep for both. One row per host, the newest check of it by the
time the check carries: first the hosts whose check failed (with its error) or read only part
of the host, then the rest worst first; each with its instances, how many of the running ones
are on huge pages, whether the pool is short of the plan or holds pages nothing uses, THP
conflicts, the crit/warn counts, its worst findings and the pool and THP values to set.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import asdict, dataclass

from ..kit.errors import InputError

RANK = {"crit": 3, "warn": 2, "info": 1, "ok": 0}


@dataclass
class Row:
    host: str
    source: str
    instances: list[str]
    running: int
    on_huge_pages: int
    pool: str  # "ok", "short by N x SIZE", "N x SIZE unused", "none": for people
    pool_short: dict[str, int]  # page size (kB) -> pages the pool lacks against the plan
    pool_unused: dict[str, int]  # page size (kB) -> pool pages nothing found uses
    thp_conflicts: int
    crit: int
    warn: int
    worst: str
    fallbacks: list[str]
    checked_at: str  # ISO 8601 UTC, when the facts were read
    time_from: str  # "check": the report's own time; else the file's, for older reports
    hpadvise_version: str
    error: str | None  # the check's input errors (it exited 2), None when it had none
    unread: int  # files the check could not read (a partial view)
    worst_findings: list[str]  # the titles at the worst severity (crit or warn), instance first
    to_set: list[str]  # the plan's pools and THP modes that differ from the host's now


def _load_json(path: str) -> dict:
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None
    except json.JSONDecodeError as exc:  # where the JSON breaks off, in a person's words
        raise InputError(f"{path}: not a `hpadvise check --json` output: not JSON from line "
                         f"{exc.lineno}, column {exc.colno} (cut short, or another file?)"
                         ) from None
    except ValueError:  # not UTF-8 text
        raise InputError(f"{path}: not a `hpadvise check --json` output: not text") from None
    if not isinstance(d, dict) or d.get("schema_version") != 1 or "instances" not in d:
        raise InputError(f"{path}: not a `hpadvise check --json` output (schema_version 1)")
    return d


def _check_snapshot(path: str) -> dict:
    from ..planning.pipeline import inspect
    from .render import to_dict
    from ..facts.sysroot import SysRoot
    return to_dict(inspect(SysRoot(path)), path)


def sources(paths: list[str]) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    for p in paths:
        if os.path.isfile(p):
            out.append((p, _load_json(p)))
        elif os.path.isfile(os.path.join(p, "proc/meminfo")):
            out.append((p, _check_snapshot(p)))
        elif os.path.isdir(p):
            found = 0
            for name in sorted(os.listdir(p)):
                q = os.path.join(p, name)
                if name.endswith(".json") and os.path.isfile(q):
                    out.append((q, _load_json(q)))
                    found += 1
                elif os.path.isfile(os.path.join(q, "proc/meminfo")):
                    out.append((q, _check_snapshot(q)))
                    found += 1
            if not found:
                raise InputError(f"{p}: no check --json outputs (*.json) or snapshots in it")
        else:
            raise InputError(f"{p}: no such file or directory")
    return out


def _fmt_kb(kb: int) -> str:
    return f"{kb // 1048576} GiB" if kb >= 1048576 else f"{kb // 1024} MiB"


def row(source: str, d: dict) -> Row:
    host = d.get("host") or {}
    name = host.get("hostname") or os.path.basename(source.rstrip("/")).removesuffix(".json")
    insts = d.get("instances") or []
    running = [i for i in insts if i.get("running")]
    findings = d.get("findings") or []
    counts = (d.get("summary") or {}).get("counts") or {}
    pools = {p["size_kb"]: p for p in host.get("pools") or []}
    plan = d.get("plan") or {}
    short: dict[str, int] = {}
    for pp in plan.get("pools") or []:
        have = (pools.get(pp["size_kb"]) or {}).get("nr_pages") or 0
        if pp["target_pages"] > have:
            short[str(pp["size_kb"])] = pp["target_pages"] - have
    unused = {str(k): v for k, v in (plan.get("unused_pages") or {}).items()}
    parts = [f"short by {n} x {_fmt_kb(int(k))}" for k, n in short.items()] + \
        [f"{n} x {_fmt_kb(int(k))} unused" for k, n in unused.items()]
    worst = (d.get("summary") or {}).get("worst", "ok")
    at, time_from = d.get("checked_at"), "check"
    if not at:  # a report of an hpadvise from before checks carried their time
        import time
        try:
            at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(source)))
        except OSError:
            at = "1970-01-01T00:00:00Z"
        time_from = "file"
    to_set = [f"{_fmt_kb(pp['size_kb'])} pool = {pp['target_pages']}"
              for pp in plan.get("pools") or [] if pp["target_pages"] != pp["current_pages"]]
    to_set += [(f"THP {c['knob']}" if c["kind"] == "thp" else c["knob"])
               + f" = {c['recommended']}" for c in plan.get("changes") or []
               if c.get("kind") in ("thp", "sysctl") and c.get("recommended") != c.get("current")]
    return Row(name, source, [i["id"] for i in insts], len(running),
               sum(1 for i in running if i.get("backing") == "hugetlb"),
               "; ".join(parts) or ("ok" if plan.get("pools") else "none"), short, unused,
               sum(1 for f in findings if f["code"] == "thp.conflict"),
               counts.get("crit", 0), counts.get("warn", 0), worst,
               [f["instance"] or "" for f in findings if f["code"].endswith("fallback")],
               at, time_from, d.get("hpadvise_version") or "unknown",
               "; ".join(d.get("errors") or []) or None, len(d.get("notes") or []),
               [(f"{f['instance']}: " if f.get("instance") else "") + f["title"]
                for f in findings if f["severity"] == worst and worst in ("crit", "warn")],
               to_set)


def rows(paths: list[str]) -> list[Row]:
    """One row per host: where several reports name one host, the newest check (by the time
    it carries, not the file's) stands for it. Hosts whose check failed come first, then
    those it read only in part, then the rest, worst first."""
    latest: dict[str, Row] = {}
    for s, d in sources(paths):
        r = row(s, d)
        if r.host not in latest or r.checked_at >= latest[r.host].checked_at:
            latest[r.host] = r
    return sorted(latest.values(), key=lambda r: (r.error is None, r.unread == 0,
                                                  -RANK.get(r.worst, 0), -r.crit, -r.warn,
                                                  r.host))


def headline(rs: list[Row]) -> str:
    """How many hosts, and how many of them failed or were read in part."""
    n = len(rs)
    failed, partial = sum(r.error is not None for r in rs), sum(
        r.error is None and r.unread > 0 for r in rs)
    extra = [f"{failed} failed" if failed else "", f"{partial} read in part" if partial else ""]
    said = ", ".join(x for x in extra if x)
    return (f"{n} host{'s' if n != 1 else ''}" + (f" ({said})" if said else "")
            + (": failed and partial checks first, then worst first" if n > 1 else ""))


def to_json(rs: list[Row]) -> str:
    return json.dumps([asdict(r) for r in rs], indent=2)


def _cells(r: Row) -> tuple:
    worst = r.worst_findings[0] + (f" (+{len(r.worst_findings) - 1} more)"
                                   if len(r.worst_findings) > 1 else "") \
        if r.worst_findings else "-"
    unread = f" ({r.unread} file{'s' if r.unread != 1 else ''} unread)" if r.unread else ""
    state = f"check failed: {r.error}" if r.error else r.worst + unread
    return (r.host, state, r.crit, r.warn, f"{r.on_huge_pages} of {r.running}",
            "; ".join(r.to_set) or "-", worst)


HEAD = ("host", "worst", "crit", "warn", "on huge pages", "to set", "worst finding")


def to_html(rs: list[Row]) -> str:
    """The fleet page: its first screen is the table of what to do per host; the details
    (instances, THP conflicts, fallbacks, when each host was checked, by which release)
    follow."""
    color = {"crit": "#f8d0d0", "warn": "#fbeec0", "info": "#e8eef8", "ok": "#e0f2e0"}
    trs, details = [], []
    for r in rs:
        bg = "#e8c0f0" if r.error else color.get(r.worst, "#fff")
        trs.append(f'<tr style="background:{bg}">' + "".join(
            f"<td>{html.escape(str(c))}</td>" for c in _cells(r)) + "</tr>")
        details.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            r.host, ", ".join(r.instances) or "-", r.pool, r.thp_conflicts,
            ", ".join(r.fallbacks) or "-", r.checked_at + ("" if r.time_from == "check" else
                                                           " (file time)"),
            r.hpadvise_version, r.source)) + "</tr>")
    dhead = ("host", "instances", "pool", "THP conflicts", "fallbacks", "checked", "hpadvise",
             "source")
    return ("<!doctype html><meta charset=utf-8><title>hpadvise fleet report</title>"
            "<style>body{font-family:sans-serif}td,th{padding:4px 8px;text-align:left;"
            "vertical-align:top}table{border-collapse:collapse}</style>"
            f"<h1>Huge pages across the fleet</h1><p>{html.escape(headline(rs))}.</p><table><tr>"
            + "".join(f"<th>{h}</th>" for h in HEAD) + "</tr>" + "".join(trs) + "</table>"
            "<h2>Details</h2><table><tr>" + "".join(f"<th>{h}</th>" for h in dhead) + "</tr>"
            + "".join(details) + "</table>\n")


def render(rs: list, console) -> None:
    """`report` for people: what to do per host, failed and partial checks first."""
    from rich.table import Table
    console.print(headline(rs))
    t = Table(*HEAD, box=None)
    for r in rs:
        t.add_row(*(str(c) for c in _cells(r)))
    console.print(t)
