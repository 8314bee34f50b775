"""probe: what a TLB miss costs on this host."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from ..errors import InputError
from .app import app
from .common import Format2, JsonOpt, TableOrJson, fmt_of, print_json


@app.command("probe")
def probe_cmd(
    size: Annotated[Optional[str], typer.Option(
        help="Working set, e.g. 4GiB [default: the planned pools' size, at least 256 MiB, "
             "capped by available memory].")] = None,
    accesses: Annotated[int, typer.Option(help="Random 8-byte reads per run.")] = 20_000_000,
    runs: Annotated[int, typer.Option(help="Runs per variant (the best counts).")] = 3,
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
):
    """Measure what a TLB miss costs here: random reads over one working set on 4 KiB pages,
    2 MiB THP, 2 MiB and 1 GiB static pages (pools grown for the probe and given back), and the
    upper bound of what huge pages can gain. Takes well under a minute by default.

    Examples:

      hpadvise probe

      hpadvise probe --size 8GiB --json
    """
    from .. import probe
    from ..sizing import fmt_bytes, parse_bytes
    form = fmt_of(fmt, json_out)
    if accesses < 100_000 or runs < 1:
        raise InputError("--accesses: give at least 100000; --runs: at least 1")
    from ..sysroot import SysRoot
    if size:
        from ..host import collect
        nbytes = parse_bytes(size, "--size")
        host = collect(SysRoot("/"))
    else:  # the planned pools' size; the plan's host facts serve the probe too
        from ..pipeline import inspect
        r = inspect(SysRoot("/"))
        host = r.host
        planned = sum(p.target_pages * p.size_kb * 1024 for p in r.pools)
        avail = (host.mem.available_kb or 0) * 1024
        nbytes = min(max(planned, 256 << 20), int(avail * 0.5)) if avail else max(planned,
                                                                                    256 << 20)
    say = (lambda m: print(f"probe: {m}", file=sys.stderr, flush=True))
    res = probe.run(nbytes, accesses, runs, say, "pdpe1gb" in host.cpu_flags,
                    host.thp.enabled.value)
    if form == "json":
        from dataclasses import asdict
        print_json({**asdict(res), "saving_ns": res.saving_ns(),
                     "bound": {f"{m:g}": res.bound(m) for m in (0.01, 0.05, 0.1, 0.25, 1.0)}})
        return
    print(f"Working set {fmt_bytes(res.size_bytes)}, {res.accesses} random 8-byte reads per run, "
          f"best of {runs} ({res.seconds:.0f} s in all):")
    for v in res.variants:
        if v.ns is None:
            print(f"  {v.name:14} skipped: {v.skipped}")
        else:
            print(f"  {v.name:14} {v.ns:6.1f} ns per access   ({v.backing})")
    s = res.saving_ns()
    if s is not None:
        print(f"A huge page saves {s:.1f} ns per access that misses the TLB here "
              f"({s / res.by('4 KiB').ns:.0%} of a 4 KiB access).")
        print("Upper bound of the gain for a workload whose accesses miss the TLB:")
        for m in (0.01, 0.05, 0.1, 0.25):
            print(f"  {m:>4.0%} of accesses -> at most {res.bound(m):.1%}")
        print("An upper bound: only if all of the workload's time were such accesses; "
              "`hpadvise validate` measures the real gain.")
    print(f"dTLB counters: {res.pmu}" if res.pmu != "present" else
          "dTLB counters: a PMU is present (validate and perf stat can count misses)")
