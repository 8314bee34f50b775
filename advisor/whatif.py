"""`hpadvise size`: the plan for database configurations that are not deployed yet, on this
host or on a snapshot of the target host.

Each engine sizes its planned instance (Engine.what_if: PostgreSQL asks `postgres -C` on a
throwaway initdb, MariaDB's and the JVM's own binaries resolve the settings, then the models
`check` uses). The instances go through the same plan as running ones: one pool per page size
with the profile's headroom, the OS floor, runtime feasibility. The verdict per pool:
- fits: the pool can be set at runtime now;
- fits after a boot-time reservation: the memory is there, but a runtime allocation cannot be
  relied on (1 GiB pages; or free memory too fragmented for the 2 MiB pages; pool.fragmented /
  pool.gigantic_runtime findings) -> `hugepagesz= hugepages=` on the kernel command line;
- does not fit: the pools would leave the OS less than the profile's floor (pool.os_floor).
"""

from __future__ import annotations

from dataclasses import dataclass

from .engines import Instance
from .plan import Report, build
from .sizing import fmt_bytes, fmt_page


@dataclass
class Verdict:
    size_kb: int
    pages: int
    verdict: str  # fits | fits after a boot-time reservation | does not fit
    how: str  # what to set
    left_for_os_bytes: int | None


def groups(argv: list[str]) -> list[tuple[str, list[str]]]:
    """`ENGINE ARGS [+ ENGINE ARGS ...]` -> [(engine, args)]."""
    from .errors import InputError
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


def size(host, wanted: list[tuple[str, list[str]]], profile, version: str | None) -> Report:
    from .engines import registry
    engines = {}
    insts: list[Instance] = []
    for name, args in wanted:
        [canon] = registry.resolve([name], what="engine") or [None]
        if canon is None:
            from .errors import InputError
            raise InputError("give one engine per group, not all")
        eng = registry.get(canon)
        engines[canon] = eng
        inst = eng.what_if(args, host, version)
        n = sum(1 for i in insts if i.engine == canon)
        if n:
            inst.id = f"{inst.id}{n + 1}"
            inst.demand.instance = inst.id
        insts.append(inst)
    return build(host, insts, profile, engines)


def verdicts(r: Report) -> list[Verdict]:
    codes = {f.code for f in r.findings}
    total = (r.host.mem.total_kb or 0) * 1024
    pools_b = sum(p.target_pages * p.size_kb * 1024 for p in r.pools)
    left = total - pools_b if total else None
    out = []
    for p in r.pools:
        size = "1G" if p.size_kb >= 1048576 else f"{p.size_kb // 1024}M"
        if "pool.os_floor" in codes:
            v, how = "does not fit", (f"the pools ({fmt_bytes(pools_b)}) would leave "
                                      f"{fmt_bytes(max(0, left or 0))} of "
                                      f"{fmt_bytes(total)} to the OS, under the profile's floor: "
                                      "lower the settings or add RAM")
        elif p.size_kb >= 1048576 or ("pool.fragmented" in codes and any(
                f.code == "pool.fragmented" and fmt_page(p.size_kb) in f.title
                for f in r.findings)):
            v, how = "fits after a boot-time reservation", \
                f"kernel command line: hugepagesz={size} hugepages={p.target_pages}"
        else:
            v, how = "fits", (f"vm.nr_hugepages = {p.target_pages}"
                              if p.size_kb == r.host.default_hugepage_kb else
                              f"echo {p.target_pages} > /sys/kernel/mm/hugepages/"
                              f"hugepages-{p.size_kb}kB/nr_hugepages")
        out.append(Verdict(p.size_kb, p.target_pages, v, how, left))
    return out
