"""probe: what a TLB miss costs on this host."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from ..kit.errors import InputError
from .app import app
from .common import Format2, JsonOpt, TableOrJson, fmt_of, OutputOpt, deliver


@app.command("probe")
def probe_cmd(
    size: Annotated[Optional[str], typer.Option(
        metavar="SIZE", help="Working set, e.g. 4GiB [default: the planned pools' size, at least 256 MiB, "
             "capped by available memory].")] = None,
    accesses: Annotated[int, typer.Option(help="Random 8-byte reads per run.")] = 20_000_000,
    runs: Annotated[int, typer.Option(help="Runs per variant (the best counts).")] = 3,
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
):
    """Measure what a TLB miss costs here: random reads over one working set on every page size
    the kernel offers (x86-64: 4 KiB pages, 2 MiB THP, 2 MiB and 1 GiB static pages; arm64
    also 64 KiB and 32 MiB), static pools grown for the probe and given back, and the upper
    bound of what huge pages can gain. Takes well under a minute by default.

    Examples:

    \b
      hpadvise probe
      hpadvise probe --size 8GiB --json
    """
    from ..facts import probe
    from ..kit.sizing import parse_bytes
    form = fmt_of(fmt, json_out)
    if accesses < 100_000 or runs < 1:
        raise InputError("--accesses: give at least 100000; --runs: at least 1")
    from ..facts.sysroot import SysRoot
    if size:
        from ..facts.host import collect
        nbytes = parse_bytes(size, "--size")
        host = collect(SysRoot("/"))
    else:  # the planned pools' size; the plan's host facts serve the probe too
        from ..planning.pipeline import inspect
        r = inspect(SysRoot("/"))
        host = r.host
        planned = sum(p.target_pages * p.size_kb * 1024 for p in r.pools)
        avail = (host.mem.available_kb or 0) * 1024
        nbytes = min(max(planned, 256 << 20), int(avail * 0.5)) if avail else max(planned,
                                                                                    256 << 20)
    say = (lambda m: print(f"probe: {m}", file=sys.stderr, flush=True))
    res = probe.run(nbytes, accesses, runs, say, host.geometry(), host.thp.enabled.value)
    deliver(form, probe.to_json(res), lambda: probe.render(res, runs), output)
