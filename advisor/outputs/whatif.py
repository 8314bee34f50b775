"""`hpadvise size`: the plan for database configurations that are not deployed yet, on this
host or on a snapshot of the target host.

The verdicts are the plan's own (PoolPlan.feasibility); this module only words them. Each
engine sizes its planned instance (Engine.what_if: PostgreSQL asks `postgres -C` on a
throwaway initdb, MariaDB's and the JVM's own binaries resolve the settings, then the models
`check` uses). The instances go through the same plan as running ones: one pool per page size
with the profile's headroom, the OS floor, runtime feasibility. The verdict per pool:
- fits: the pool can be set at runtime now;
- fits after a boot-time reservation: the memory is there, but a runtime allocation cannot be
  relied on (more 1 GiB pages than the pool holds; or free memory too fragmented for the
  2 MiB pages) -> `hugepagesz= hugepages=` on the kernel command line;
- does not fit: the pools would leave the OS less than the profile's floor (pool.os_floor).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..api.engines import Instance, Targets
from ..planning.plan import Report, build
from ..kit.paths import sysfs_pool
from ..kit.sizing import cmdline_size


@dataclass
class Verdict:
    size_kb: int
    pages: int
    verdict: str  # fits | fits after a boot-time reservation | does not fit
    how: str  # what to set
    left_for_os_bytes: int | None


def groups(argv: list[str]) -> list[tuple[str, list[str]]]:
    """`ENGINE ARGS [+ ENGINE ARGS ...]` -> [(engine, args)]."""
    from ..kit.errors import InputError
    out: list[tuple[str, list[str]]] = []
    cur: list[str] = []
    for a in argv + ["+"]:
        if a == "+":
            if not cur:
                raise InputError("give an engine and its settings, e.g. hpadvise size postgres "
                                 "shared_buffers=64GB (several: separate them with +)")
            out.append((cur[0], cur[1:]))
            cur = []
        else:
            cur.append(a)
    return out


def size(host, wanted: list[tuple[str, list[str]]], profile, version: str | None,
         targets: Targets | None = None) -> Report:
    from ..api.engines import registry
    engines = {}
    insts: list[Instance] = []
    for name, args in wanted:
        [canon] = registry.resolve([name], what="engine") or [None]
        if canon is None:
            from ..kit.errors import InputError
            raise InputError("give one engine per group, not all")
        eng = registry.get(canon)
        engines[canon] = eng
        inst = eng.what_if(args, host, version, targets or Targets())
        n = sum(1 for i in insts if i.engine == canon)
        if n:  # a second planned instance of the engine: an ID of its own
            inst.id = f"{inst.id}{n + 1}"
            if inst.demand is not None:
                inst.demand = dataclasses.replace(inst.demand, instance=inst.id)
        insts.append(inst)
    from ..planning.pipeline import own_cgroups
    own_cgroups(host, insts)
    return build(host, insts, profile, engines)


# The words `size` uses for each feasibility the plan decides (sizing.FEASIBILITY).
WORDS = {"fits": "fits", "boot_reservation": "fits after a boot-time reservation",
         "does_not_fit": "does not fit"}


def verdicts(r: Report) -> list[Verdict]:
    """Each planned pool's feasibility, as the plan decided it, and what to set."""
    total = (r.host.mem.total_kb or 0) * 1024
    pools_b = sum(p.target_bytes for p in r.pools)
    left = total - pools_b if total else None
    out = []
    for p in r.pools:
        if p.feasibility == "does_not_fit":
            how = f"{p.feasibility_reason}: lower the settings or add RAM"
        elif p.feasibility == "boot_reservation":
            how = f"kernel command line: hugepagesz={cmdline_size(p.size_kb)} " \
                  f"hugepages={p.target_pages}"
        elif p.size_kb == r.host.default_hugepage_kb:
            how = f"vm.nr_hugepages = {p.target_pages}"
        else:
            how = f"echo {p.target_pages} > {sysfs_pool(p.size_kb)}"
        out.append(Verdict(p.size_kb, p.target_pages, WORDS[p.feasibility], how, left))
    return out


def to_json(r: Report) -> dict:
    """`size --json`: the planned instances, each pool's verdict, the findings, the settings."""
    from dataclasses import asdict

    from .render import change_json, version_json
    return {"instances": [{"engine": i.engine, "id": i.id, "label": i.label,
                           "version": version_json(i), "demand": asdict(i.demand)}
                          for i in r.instances],
            "pools": [asdict(v) for v in verdicts(r)],
            "findings": [asdict(f) for f in r.findings],
            "changes": [change_json(c) for c in r.changes if c.kind == "setting"]}


def render(r: Report, console) -> None:
    """`size` for people: the planned instances, each pool's verdict and what to set."""
    from rich.table import Table

    from ..kit.sizing import fmt_bytes, fmt_page
    t = Table("planned", "pages", "count", box=None)
    for i in r.instances:
        d = i.demand
        t.add_row(i.label, ", ".join(f"{n} x {fmt_page(kb)}" for kb, n in sorted(d.pages.items())),
                  ("exact: " if d.exact else "estimate: ") + d.source)
    console.print(t)
    for v in verdicts(r):
        console.print(f"{fmt_page(v.size_kb)} pool: {v.pages} pages "
                      f"({fmt_bytes(v.pages * v.size_kb * 1024)}): [bold]{v.verdict}[/bold] -> "
                      f"{v.how}" + (f"; leaves {fmt_bytes(v.left_for_os_bytes)} for the OS"
                                    if v.left_for_os_bytes is not None and
                                    v.verdict != "does not fit" else ""))
    for c in r.changes:
        if c.kind == "setting":
            console.print(f"{c.instance}: set {c.target} = {c.recommended} ({c.reason})")
    for f in r.findings:
        if f.severity in ("warn", "crit") and f.code.startswith(("pool.", "commit.")):
            console.print(f"{f.severity}: {f.title}")
