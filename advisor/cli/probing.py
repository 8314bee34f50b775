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
    journal_dir: Annotated[Optional[str], typer.Option(
        metavar="DIR", help="Journal directory for the pools it grows [default: "
             "$HPADVISE_JOURNAL_DIR or /var/lib/hpadvise/journal].")] = None,
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
    pools = JournaledPools(journal_dir)
    try:
        res = probe.run(nbytes, accesses, runs, say, host.geometry(), host.thp.enabled.value,
                        pools)
    finally:
        pools.close()
    deliver(form, probe.to_json(res), lambda: probe.render(res, runs), output)


class JournaledPools:
    """probe's pools, journaled as apply's are (a journal of its own, command "probe"): each
    growth is recorded before it is made, the pool is given back after its variant, and the
    journal is closed as rolled back at the end. A probe killed with a pool grown leaves that
    to `hpadvise rollback`, and apply, capture and validate over that pool are refused until
    then (ledger/stacked.py)."""

    def __init__(self, directory: str | None):
        from ..ledger import journal as jr
        self.dir = jr.journal_dir(directory)
        self.j = None

    def grow(self, kb: int, pages: int):
        import os

        from ..changes.actions import Pool
        from ..facts.probe import grow_pool
        from ..ledger import journal as jr
        from ..ledger.stacked import refuse_stacked
        a = Pool(kb)
        if not os.path.exists(a.path) or os.geteuid() != 0:
            return grow_pool(kb, pages)  # says why not, changing nothing
        jr.open_dir(self.dir)
        with jr.Lock(self.dir):
            refuse_stacked(self.dir, [a], "probe")
            if self.j is None:
                self.j = jr.Journal.create(self.dir, {"argv": sys.argv[1:], "command": "probe"})
            old = a.get()
            e = self.j.intent(a, old, old + pages)
            got = grow_pool(kb, pages)
            self.j.done(e, a.get())
        return got

    def restore(self, kb: int, old: int) -> None:
        from ..facts.probe import restore_pool
        restore_pool(kb, old)

    def close(self) -> None:
        """Every pool back (each was given back after its variant: the rollback reads them
        back and restores what was not), and the journal marked rolled back."""
        if self.j is None:
            return
        from ..ledger import journal as jr
        with jr.Lock(self.dir):
            _, errors = jr.rollback(self.j)
            self.j.mark_rolled_back(errors)
