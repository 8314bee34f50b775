"""validate: the plan proven by A/B benchmark runs."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from ..kit.errors import InputError
from .app import app
from .common import complete_engines
from .common import (Format2, JsonOpt, ValidateFormat, ValidateOutput, _output_callback, emit,
                     fmt_of, pct, targets)
from .common import console as make_console


@app.command()
def validate(
    db: Annotated[Optional[str], typer.Option(
        autocompletion=complete_engines,
        metavar="ENGINE", help="Engine to benchmark, one of those `hpadvise engines` shows with benchmarks "
             "(postgres, mysql: a scratch MariaDB server) [default: the engine that declares "
             "itself validate's default, postgres].")] = None,
    duration: Annotated[str, typer.Option(
        metavar="DURATION", help="Time budget for the runs (loading the data comes on top), e.g. 90s, 10m, 1h.")]
    = "10m",
    bench: Annotated[Optional[str], typer.Option(
        metavar="NAME", help="pgbench (postgres) or tpcc (hpadvise's TPC-C for sysbench; postgres and mysql) "
             "[default: pgbench for postgres, tpcc for mysql].")] = None,
    workload: Annotated[Optional[str], typer.Option(
        metavar="NAME", help="The benchmark's workload: pgbench tpcb (its default script: updates, WAL, "
             "fsync) or select (select-only: the memory effect alone); tpcc has one "
             "[default: tpcb for pgbench].")] = None,
    variants: Annotated[Optional[str], typer.Option(
        metavar="V,V,...", help="Comma-separated: current, recommended, thp-always, thp-never, thp-shmem, "
             "hugepages-off, hugepages-1g [default: current,recommended,thp-never,thp-always]. "
             "A variant named twice is an A/A run (the second is labelled name#2).")]
    = None,
    design: Annotated[str, typer.Option(
        metavar="NAME", help="restart (every run restarts the server in its variant), resident (one server "
             "per variant, alternating runs), simultaneous (one server per variant, measured "
             "at once on their own CPUs) or auto: simultaneous where memory and CPUs allow, "
             "else restart. Side by side, THP variants are phases: the THP setting changes "
             "from epoch to epoch while the per-server variants (current, recommended, ...) "
             "run side by side in every epoch.")] = "auto",
    rounds: Annotated[Optional[int], typer.Option(
        help="Runs of every variant per server start, resident and simultaneous designs "
             "[default: 1 when simultaneous, one per server side by side if they never "
             "trade CPUs (--swap-seconds 0), 2 resident].")] = None,
    swap_seconds: Annotated[Optional[float], typer.Option(
        help="Simultaneous design: the servers trade CPUs this often within a run, 0 never "
             "[default: about 3, cutting the run into equal pieces on every CPU].")] = None,
    clients: Annotated[Optional[int], typer.Option(
        help="Clients (pgbench -c, sysbench --threads), shared out among servers side by side "
             "[default: 2 per CPU, at least 16; TPC-B: at most the scale a server].")] = None,
    scale: Annotated[Optional[int], typer.Option(
        help="pgbench scale or TPC-C warehouses [default: what fits in the buffers].")] = None,
    run_seconds: Annotated[Optional[int], typer.Option(
        help="Length of one measured run [default: 30; 15 side by side with buffers under "
             "half a GiB, where more starts narrow the interval; less if the budget is short, "
             "at least 10].")] = None,
    warmup_seconds: Annotated[Optional[int], typer.Option(
        help="Warm-up before each measured run, same connections, left out of the figures "
             "[default: 3 + 1 per GiB of buffers, at most 20].")] = None,
    run_grace: Annotated[Optional[int], typer.Option(
        "--run-grace", metavar="SECONDS",
        help="How long a run may go on past its warm-up and measured seconds before its "
             "clients are stopped and validate ends with what it measured so far: longer "
             "for a --script whose transactions take minutes, shorter to give up sooner "
             "on a server that stopped making progress [default: 60].")] = None,
    buffers: Annotated[Optional[str], typer.Option(
        "--buffers", "--shared-buffers", metavar="SIZE",
        help="The scratch server's buffers: shared_buffers (postgres) or innodb_buffer_pool_size "
             "(mysql) [default: those of the largest running instance of the engine, capped "
             "by available memory; 1GB when none runs].")] = None,
    target_ci: Annotated[Optional[str], typer.Option(
        metavar="PCT", help="Stop early once every comparison's 95% CI half-width is this small [default: "
             "use the whole budget]. An interval stopped on its own width covers less than "
             "95% (90-95% in a simulation of this rule).")] = None,
    band: Annotated[str, typer.Option(metavar="PCT", help="Noise band for the verdict words.")] = "1%",
    profile: Annotated[str, typer.Option(metavar="NAME|FILE", help="Profile for the recommended variant.")] = "oltp",
    instance: Annotated[Optional[str], typer.Option(
        metavar="ID", help="Benchmark this running instance (its ID, data directory, port or a Debian "
             "cluster's name, 15/main; in a scratch database validate creates and drops) "
             "instead of a scratch cluster.")] = None,
    script: Annotated[Optional[str], typer.Option(
        metavar="FILE", help="Your own workload: a pgbench script (pgbench -f; variables "
             "and meta-commands as pgbench reads them) or, with --bench tpcc, a sysbench Lua "
             "script, run in place of the built-in workload in every design.")] = None,
    copy: Annotated[bool, typer.Option(
        "--copy", help="With --instance: the scratch servers are copies of that running "
             "cluster (pg_basebackup; its only load is the copy's read), so the runs work "
             "on its data; the instance itself is never restarted or changed. Needs "
             "--script or --replay.")] = False,
    replay: Annotated[Optional[str], typer.Option(
        metavar="LOG|DIR", help="Replay a captured statement log with pgreplay on every "
             "variant's copy: a directory from `hpadvise capture` (with the base backup "
             "taken before its log), or a log file (csvlog, or stderr with log_line_prefix "
             "'%m|%u|%d|%c|') with --instance ID --copy. Its statements write on the "
             "copies only.")] = None,
    replay_speed: Annotated[Optional[float], typer.Option(
        metavar="FACTOR", help="pgreplay's speed factor (-s): 1 replays at the logged pace "
             "[default: as fast as the server serves it].")] = None,
    database: Annotated[Optional[str], typer.Option(
        metavar="NAME", help="The copy's database --script runs in [default: its largest].")]
    = None,
    allow_restart: Annotated[bool, typer.Option(
        "--allow-restart", help="Let validate restart --instance between variants.")] = False,
    journal_dir: Annotated[Optional[str], typer.Option(
        metavar="DIR", help="Journal directory: what validate changes is journaled there "
             "while it runs, so that `hpadvise rollback` restores a validate that was killed "
             "[default: apply's, $HPADVISE_JOURNAL_DIR or /var/lib/hpadvise/journal].")] = None,
    scratch: Annotated[bool, typer.Option(
        "--scratch", help="Use a scratch cluster (the default).")] = False,
    report: Annotated[Optional[str], typer.Option(
        "--html", "--report", metavar="FILE", callback=_output_callback,
        help="Write an HTML report here.")] = None,
    fmt: ValidateFormat = Format2.table,
    json_out: JsonOpt = False,
    output: ValidateOutput = None,
):
    """Prove the plan: pgbench or TPC-C A/B runs on a scratch server, with and without huge
    pages and THP, blocked and interleaved, with a paired 95% CI and a verdict. Restores every
    knob.

    Examples:

    \b
      hpadvise validate --duration 10m --buffers 8GB --html hp.html
      hpadvise validate --duration 2m --variants current,recommended --workload tpcb
      hpadvise validate --variants hugepages-off,current --design simultaneous --duration 10m
      hpadvise validate --variants recommended,recommended --band 2% --duration 10m
      hpadvise validate --db mysql --bench tpcc --duration 10m --buffers 4GB
      hpadvise validate --db postgres --bench tpcc --duration 5m
      hpadvise validate --script my.sql --duration 10m
      hpadvise validate --instance main --copy --script orders.sql --database shop
      hpadvise capture --instance main --duration 5m --output /var/tmp/cap
      hpadvise validate --replay /var/tmp/cap --duration 20m --html replay.html
    """
    import json

    from ..benchmarks import report as rep
    from ..benchmarks.options import Options
    from ..benchmarks.runner import Validation
    from ..benchmarks.variants import DEFAULT_VARIANTS, parse_duration

    from ..api.engines import registry
    benched = [e.name for e in registry.all() if e.benches]
    if db is None:
        db = next((e.name for e in registry.all() if e.validate_default and e.benches),
                  benched[0] if benched else "")
    names = registry.resolve([db]) or []
    if len(names) != 1:
        raise InputError(f"--db {db}: validate benchmarks one engine; name it "
                         f"({', '.join(benched)})")
    db = names[0]
    opts = Options(db=db, bench=bench or "",
        variants=[v.strip() for v in variants.split(",")] if variants else list(DEFAULT_VARIANTS),
        duration_s=parse_duration(duration), workload=workload, clients=clients, scale=scale,
        run_s=run_seconds, warm_s=warmup_seconds,
        **({} if run_grace is None else {"run_grace_s": run_grace}),
        target_ci_pct=pct(target_ci, "--target-ci") if target_ci is not None else None,
        band_pct=pct(band, "--band"), buffers=buffers, profile=profile,
        instance=instance, allow_restart=allow_restart, journal_dir=journal_dir,
        design=design, rounds=rounds,
        swap_s=swap_seconds, targets=targets(), variants_given=variants is not None,
        script=script, copy=copy, replay=replay, replay_speed=replay_speed, database=database)
    if scratch and instance:
        raise InputError("--scratch and --instance exclude each other")
    form = fmt_of(fmt, json_out)
    if output and form != "json":
        raise InputError("--output writes the JSON result: add --json")
    to_stdout = form == "json" and not output
    console = make_console(stderr=to_stdout)
    live = rep.LiveStatus(console)
    from ..benchmarks.switching import ValidateError
    val = Validation(opts, on_update=live.update)
    try:
        val.run()
    except ValidateError as exc:  # everything is restored by now
        live.stop()
        print(f"hpadvise: error: {exc}; every knob is restored", file=sys.stderr)
        raise typer.Exit(1) from None
    finally:
        live.stop()
    if val.interrupted and not val.samples:  # no report of a run that measured nothing
        errors = val.meta.get("restore_errors") or []
        for e in errors:
            print(f"hpadvise: error: could not restore {e}", file=sys.stderr)
        print("hpadvise: validate interrupted before anything was measured"
              + ("" if errors else "; every knob is restored"), file=sys.stderr)
        raise typer.Exit(1 if errors else 130)
    result = val.result()
    rep.render_terminal(result, console)
    if report:
        emit(rep.render_html(result), report, "--html")
        console.print(f"report: {report}")
    if form == "json":
        from ..benchmarks.stats import finite
        emit(json.dumps(finite(result), indent=2, default=str, allow_nan=False) + "\n",
             output)
    for e in result["meta"].get("restore_errors", []):
        print(f"hpadvise: error: could not restore {e}", file=sys.stderr)
    if result["meta"].get("restore_errors"):
        raise typer.Exit(1)
    if val.failed:
        print(f"hpadvise: error: {val.failed}; every knob is restored", file=sys.stderr)
        raise typer.Exit(1)
    if val.interrupted:
        raise typer.Exit(130)
