"""`hpadvise report`: many hosts' `check --json` outputs or snapshots in one table, worst first.

Each host is read from what `check` writes (a JSON file, schema_version 1) or from a snapshot
directory (`hpadvise snapshot`), which is checked here the same way; a directory that is
neither is searched one level deep for both. One row per host: its instances, how many of the
running ones are on huge pages, whether the pool is short of the plan or holds pages nothing
uses, THP conflicts, and the crit/warn counts.
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


def _load_json(path: str) -> dict:
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a `hpadvise check --json` output ({exc})") from None
    if not isinstance(d, dict) or d.get("schema_version") != 1 or "instances" not in d:
        raise InputError(f"{path}: not a `hpadvise check --json` output (schema_version 1)")
    return d


def _check_snapshot(path: str) -> dict:
    from ..planning.pipeline import inspect
    from .render import to_dict
    from ..facts.sysroot import SysRoot
    return to_dict(inspect(SysRoot(path)))


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
    return Row(name, source, [i["id"] for i in insts], len(running),
               sum(1 for i in running if i.get("backing") == "hugetlb"),
               "; ".join(parts) or ("ok" if plan.get("pools") else "none"), short, unused,
               sum(1 for f in findings if f["code"] == "thp.conflict"),
               counts.get("crit", 0), counts.get("warn", 0),
               (d.get("summary") or {}).get("worst", "ok"),
               [f["instance"] or "" for f in findings if f["code"].endswith("fallback")])


def rows(paths: list[str]) -> list[Row]:
    """One row per host, worst first: where several reports name one host, the newest file
    (by its modification time) stands for it."""
    latest: dict[str, tuple[float, Row]] = {}
    for s, d in sources(paths):
        r = row(s, d)
        try:
            t = os.path.getmtime(s)
        except OSError:
            t = 0.0
        if r.host not in latest or t >= latest[r.host][0]:
            latest[r.host] = (t, r)
    out = [r for _, r in latest.values()]
    return sorted(out, key=lambda r: (-RANK.get(r.worst, 0), -r.crit, -r.warn, r.host))


def to_json(rs: list[Row]) -> str:
    return json.dumps([asdict(r) for r in rs], indent=2)


def to_html(rs: list[Row]) -> str:
    head = ("host", "worst", "crit", "warn", "instances", "on huge pages", "pool",
            "THP conflicts", "fallbacks")
    color = {"crit": "#f8d0d0", "warn": "#fbeec0", "info": "#e8eef8", "ok": "#e0f2e0"}
    trs = []
    for r in rs:
        cells = (r.host, r.worst, r.crit, r.warn, ", ".join(r.instances) or "-",
                 f"{r.on_huge_pages} of {r.running}", r.pool, r.thp_conflicts,
                 ", ".join(r.fallbacks) or "-")
        trs.append(f'<tr style="background:{color.get(r.worst, "#fff")}">' +
                   "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return ("<!doctype html><meta charset=utf-8><title>hpadvise fleet report</title>"
            "<style>body{font-family:sans-serif}td,th{padding:4px 8px;text-align:left}"
            "table{border-collapse:collapse}</style><h1>Huge pages across the fleet</h1>"
            f"<p>{len(rs)} hosts, worst first.</p><table><tr>" +
            "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(trs) + "</table>\n")


def render(rs: list, console) -> None:
    """`report` for people: one row per host, worst first."""
    from rich.table import Table
    t = Table("host", "worst", "crit", "warn", "instances", "on huge pages", "pool",
              "THP conflicts", box=None)
    for r in rs:
        t.add_row(r.host, r.worst, str(r.crit), str(r.warn), ", ".join(r.instances) or "-",
                  f"{r.on_huge_pages} of {r.running}", r.pool, str(r.thp_conflicts))
    console.print(t)
