"""hpadvise command line: parse, call the library, render. Nothing else lives here."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from .errors import InputError

app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None,
    # A crash must not print local variables: they can hold a DSN with its password.
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version
        print(f"hpadvise {version('hpadvise')}")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the version and exit.")] = False) -> None:
    """Database-focused huge page advisor: size static huge page pools exactly for
    PostgreSQL and friends, and set THP the way each engine needs."""


class Format(str, Enum):
    table = "table"
    json = "json"
    prometheus = "prometheus"


class Format2(str, Enum):
    """The formats of commands that have no metrics to export."""
    table = "table"
    json = "json"


def _fmt(fmt: Format | Format2, json_out: bool,
         allowed: tuple[str, ...] = ("table", "json")) -> str:
    """--format, with --json as its short form; formats a command does not offer are refused."""
    if json_out:
        if fmt.value not in ("table", "json"):
            raise InputError(f"--json and --format {fmt.value} contradict each other; give one")
        return "json"
    if fmt.value not in allowed:
        raise InputError(f"--format {fmt.value} is not offered here; use "
                         f"{' or '.join(allowed)}")
    return fmt.value


def _emit(text: str, output: str | None) -> None:
    """Print, or replace FILE atomically (a temp file in its directory, fsync, rename): a
    reader such as node_exporter's textfile collector never sees half a file."""
    if not output or output == "-":
        sys.stdout.write(text)
        return
    import os
    import tempfile
    d = os.path.dirname(os.path.abspath(output))
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".hpadvise-", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"--output {output}: cannot write in {d}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.rename(tmp, output)
    except OSError as exc:
        os.unlink(tmp)
        raise InputError(f"--output {output}: {exc.strerror}") from None


# `--json`, alike on every command that reports: the short form of `--format json`.
JsonOpt = Annotated[bool, typer.Option("--json", help="Short for --format json.")]


def _format_opt(kind: type[Enum], help: str):
    """`--format` of a command that reports, with its formats and what they give."""
    return Annotated[kind, typer.Option("--format", case_sensitive=False, help=help)]


TableOrJson = _format_opt(Format2, "table or json.")
CheckFormat = _format_opt(Format, "table, json (the versioned report: docs/json-schema.md) or "
                          "prometheus (node_exporter textfile format).")
ApplyFormat = _format_opt(Format2, "table, or json: each change with target, before, after "
                          "and status.")
ValidateFormat = _format_opt(Format2, "table, or json: the result with every sample (progress "
                             "and tables then go to stderr unless --output is given).")
CheckOutput = Annotated[Optional[str], typer.Option(
    help="Write the report to FILE (replaced atomically) instead of printing it.")]
ValidateOutput = Annotated[Optional[str], typer.Option(
    help="Write the JSON result to FILE (replaced atomically).")]


class FailOn(str, Enum):
    none = "none"
    warn = "warn"
    crit = "crit"


@app.command()
def check(
    fmt: CheckFormat = Format.table,
    json_out: JsonOpt = False,
    output: CheckOutput = None,
    fail_on: Annotated[FailOn, typer.Option(help="Exit 1 when a finding is this severe or worse "
                                            "(for audit pipelines).", case_sensitive=False)]
    = FailOn.none,
    profile: Annotated[str, typer.Option(help="Policy: a shipped profile name or a .toml path.")]
    = "oltp",
    dsn: Annotated[Optional[list[str]], typer.Option(
        help="Connect to a server with this DSN (repeatable). Passwords are never printed.")]
    = None,
    pgdata: Annotated[Optional[list[str]], typer.Option(
        help="Also plan for a stopped PostgreSQL cluster in this data directory (repeatable).")]
    = None,
    db: Annotated[Optional[list[str]], typer.Option(
        help="Only these engines (repeatable); default: every installed engine.")] = None,
    root: Annotated[str, typer.Option(help="Read /proc, /sys and /etc under this directory "
                                      "(an `hpadvise snapshot`) instead of the live host.")]
    = "/",
    verbose: Annotated[bool, typer.Option("--verbose", "-v",
                                          help="Show sources and unreadable files.")] = False,
):
    """Inspect the host and running databases; size the pools; recommend. Changes nothing.

    Exit codes: 0 done; 1 a finding reached --fail-on; 2 bad input (the report is still
    printed where it could be made).

    Examples:

      hpadvise check

      hpadvise check --json --fail-on warn > audit.json

      hpadvise check --format prometheus --output /var/lib/node_exporter/hpadvise.prom

      hpadvise check --pgdata /srv/pg/16/main      # plan before the first start

      hpadvise check --dsn 'postgresql://app@db1:5432/postgres'
    """
    from .engines import Targets
    from .pipeline import inspect
    from .sysroot import SysRoot, snapshot_root

    from .engines import registry
    import time
    started = time.monotonic()
    form = _fmt(fmt, json_out, ("table", "json", "prometheus"))
    report = inspect(SysRoot(snapshot_root(root)), profile,
                     Targets(tuple(dsn or ()), tuple(pgdata or ())), registry.resolve(db))
    if form == "json":
        from .render import to_json
        _emit(to_json(report) + "\n", output)
    elif form == "prometheus":
        from .metrics import to_prometheus
        _emit(to_prometheus(report, time.monotonic() - started, time.time()), output)
    elif output:
        import io

        from .render import render
        buf = io.StringIO()
        render(report, _console(file=buf), verbose)
        _emit(buf.getvalue(), output)
    else:
        from .render import render
        render(report, _console(), verbose)
    for e in report.errors:
        print(f"hpadvise: error: {e}", file=sys.stderr)
    if report.errors:
        raise typer.Exit(2)
    if fail_on != FailOn.none:
        from .engines import SEVERITIES
        if SEVERITIES.index(report.worst()) >= SEVERITIES.index(fail_on.value):
            raise typer.Exit(1)


@app.command()
def snapshot(
    directory: Annotated[str, typer.Argument(help="Where to write the captured tree.")],
    pgdata: Annotated[Optional[list[str]], typer.Option(help="Stopped clusters to include.")]
    = None,
    with_environ: Annotated[bool, typer.Option(
        "--with-environ", help="Also keep the processes' environments (values of "
        "secret-looking names removed); a JVM's JAVA_TOOL_OPTIONS live there.")] = False,
):
    """Capture every file `check` reads into DIRECTORY, for offline audits (`check --root`)
    and test fixtures. The directory is readable by you only; passwords in command lines,
    option files and DSNs are replaced by ***; environments are left out unless asked for.

    Example: hpadvise snapshot /tmp/host-a && hpadvise check --root /tmp/host-a"""
    import os

    from .engines import Targets
    from .pipeline import inspect
    from .snapshot import write_snapshot
    from .sysroot import SysRoot

    if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise InputError(f"{directory} exists and is not an empty directory; give a new path")
    sr = SysRoot("/", record=True)
    inspect(sr, targets=Targets(datadirs=tuple(pgdata or ())))
    n = write_snapshot(sr, directory, environ=with_environ)
    print(f"wrote {n} files to {directory} (readable by you only; secrets replaced by ***"
          + ("" if with_environ else "; environments left out: --with-environ keeps them")
          + ")")


@app.command()
def apply(
    db: Annotated[list[str], typer.Option(
        help="Engine(s) to apply for (repeatable), or all: one plan for every instance of them.")],
    instance: Annotated[Optional[list[str]], typer.Option(
        help="Instance ID as `check` shows it, a data directory or a port (repeatable).")]
    = None,
    profile: Annotated[str, typer.Option(help="Profile name or .toml path.")] = "oltp",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the changes and stop.")]
    = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
    = False,
    restart: Annotated[bool, typer.Option("--restart", help="Restart the instance so that it "
                                          "takes its huge pages, then verify.")] = False,
    no_persist: Annotated[bool, typer.Option("--no-persist", help="Runtime changes only.")]
    = False,
    fmt: ApplyFormat = Format2.table,
    json_out: JsonOpt = False,
    print_script: Annotated[bool, typer.Option(
        "--print-script", help="Print a shell script with the same changes and stop "
        "(for someone who is root).")] = False,
    journal_dir: Annotated[Optional[str], typer.Option(
        help="Journal directory [default: $HPADVISE_JOURNAL_DIR or /var/lib/hpadvise/journal].")]
    = None,
    persist_root: Annotated[str, typer.Option(
        help="Write the persistent files (/etc/...) under this directory instead of /.")] = "",
):
    """Apply the plan for one engine's instance: pools, THP, persistence, database settings.

    Every change is journaled before it is made; `hpadvise rollback` undoes it exactly.

    Examples:

      hpadvise apply --db postgres --dry-run

      hpadvise apply --db postgres --instance 5432 --restart --yes

      hpadvise apply --db postgres --print-script > hugepages.sh   # not root? hand it over

      hpadvise apply --db all --profile mixed --dry-run   # one plan for every engine found

      hpadvise apply --db postgres --db jvm --instance 5432 --instance jvm:4242 --restart
    """
    import os

    from . import apply as ap_mod
    from . import journal as jr
    from .engines import Targets
    from .pipeline import inspect, plan_for, select
    from .sysroot import SysRoot

    json_out = _fmt(fmt, json_out) == "json"
    if print_script and json_out:
        raise InputError("--print-script prints a shell script; leave out --json (or use "
                         "--dry-run --json for the plan as JSON)")
    if os.geteuid() != 0 and not (dry_run or print_script):
        raise InputError("apply changes kernel settings and needs root; run it with sudo, or "
                         "use --print-script to hand the changes to someone who is root")
    from .engines import registry
    wanted = registry.resolve(db)
    report = inspect(SysRoot("/"), profile, Targets(), None)
    engines = report.engines
    names = sorted(engines) if wanted is None else wanted
    ask = None if (yes or not sys.stdin.isatty()) else _ask_instance
    selected = select(report, names, instance, ask)
    if not selected:
        raise InputError(f"no running or named {'/'.join(names)} instance found; "
                         "`hpadvise check` shows what is there")
    unsized = [i for i in selected if report.placements[i.id].status == "unsized"]
    if unsized and len(unsized) == len(selected):
        raise InputError(f"cannot size {', '.join(i.id for i in unsized)} as this user (its "
                         "configuration is unreadable): run as root or as the server's owner")
    report = plan_for(report, selected)
    plan = ap_mod.prepare(report, engines, restart=restart, persist=not no_persist,
                          persist_root=persist_root, read_only=os.geteuid() != 0)
    lines = ap_mod.describe(plan)
    if print_script:
        print(ap_mod.script(plan), end="")
        return
    if not json_out:
        print(f"Plan for {', '.join(i.id for i in selected)} (profile {report.profile.name}):")
        for ln in lines or ["nothing to change"]:
            print("  " + ln.replace("\n", "\n  "))
        for n in plan.notices:
            print(f"  note: {n}")
    if dry_run:
        if json_out:
            _print_json({"dry_run": True, "changes": ap_mod.changes_json(plan),
                         "notices": plan.notices, "restart_needed": plan.restart_pending})
        return
    if plan.changes and not yes:
        if not sys.stdin.isatty():
            raise InputError("no terminal to confirm on: add --yes to apply without asking")
        if not typer.confirm("Apply these changes?", default=False):
            raise typer.Exit(1)
    argv = ["apply", "--db", *names] + [a for i in instance or () for a in ("--instance", i)] \
        + (["--restart"] if restart else [])
    result = ap_mod.execute(plan, jr.journal_dir(journal_dir),
                            {"argv": argv, "instances": [i.id for i in selected],
                             "profile": report.profile.name},
                            say=(lambda m: None) if json_out else
                            (lambda m: print(f"  {m}", flush=True)))
    boot = ap_mod.verify_boot(plan, persist_root) \
        if result.status in ("ok", "nothing") and not no_persist else []
    if json_out:
        _print_json({"status": result.status, "journal": result.journal,
                     "changes": ap_mod.changes_json(plan), "problems": result.problems,
                     "notices": plan.notices, "restart_needed": plan.restart_pending,
                     "next_boot": boot})
    else:
        for d in result.done:
            print(f"done: {d}")
        if result.status == "nothing":
            print("Nothing to change: the host already matches the plan.")
        for p in plan.restart_pending:
            pool = ", ".join(f"{pp.target_pages} x {pp.size_kb} kB" for pp in report.pools)
            print(f"restart needed: {p} takes its huge pages at its next start (the pool holds "
                  f"{pool} until then, unused); run again with --restart or restart it yourself")
        if result.journal:
            print(f"journal: {result.journal} (undo with `hpadvise rollback {result.journal}`)")
        if result.status in ("ok", "nothing") and not no_persist and persist_root in ("", "/"):
            print("next boot: " + ("every planned knob comes back as planned (checked)"
                                   if not boot else "; ".join(boot)))
    for p in result.problems:
        print(f"hpadvise: error: {p}", file=sys.stderr)
    if result.status not in ("ok", "nothing"):
        raise typer.Exit(1)


@app.command()
def rollback(
    apply_id: Annotated[Optional[str], typer.Argument(
        help="The apply to undo (see `hpadvise history`); default: the latest.")] = None,
    journal_dir: Annotated[Optional[str], typer.Option(help="Journal directory.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be restored and "
                                          "stop.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (at a terminal, "
                                      "rollback asks before restoring).")] = False,
):
    """Undo an apply exactly: every knob and file back, in reverse order; restart an instance
    the apply restarted.

    Examples:

      hpadvise rollback --dry-run

      hpadvise rollback 20261122-135501-4242 --yes
    """
    import contextlib
    import os

    from . import journal as jr
    d = jr.journal_dir(journal_dir)
    if os.geteuid() != 0 and not dry_run:
        raise InputError("rollback changes kernel settings and needs root; run it with sudo "
                         "(--dry-run shows what it would restore)")
    if not dry_run and not yes and not sys.stdin.isatty():
        raise InputError("no terminal to confirm on: add --yes to roll back without asking "
                         "(--dry-run shows what it would restore)")
    if dry_run:
        jr.readable_dir(d)
    else:
        jr.open_dir(d)
    with (contextlib.nullcontext() if dry_run else jr.Lock(d)):
        j = jr.find(d, apply_id)
        if j.rolled_back is not None:
            raise InputError(f"apply {j.id} is already rolled back")
        todo = jr.plan_rollback(j)
        print(f"Rollback of {j.id} ({j.status}, {len(j.entries)} changes):")
        for line in todo or ["nothing to restore"]:
            print(f"  {line}")
        if dry_run:
            return
        if todo and not yes and not typer.confirm("Restore these?", default=False):
            raise typer.Exit(1)
        done, errors = jr.rollback(j)
        j.mark_rolled_back(errors)
    for x in done:
        print(f"restored: {x}")
    if not done:
        print("nothing to restore: every knob already had its old value")
    print(f"rolled back {j.id}")
    for e in errors:
        print(f"hpadvise: error: {e}", file=sys.stderr)
    if errors:
        raise typer.Exit(1)


@app.command()
def history(
    journal_dir: Annotated[Optional[str], typer.Option(help="Journal directory.")] = None,
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
):
    """List applies and whether they were rolled back.

    Example: hpadvise history --json | jq -r '.[] | select(.rolled_back == null) | .id'"""
    import time

    from . import journal as jr
    json_out = _fmt(fmt, json_out) == "json"
    d = jr.journal_dir(journal_dir)
    jr.readable_dir(d)
    js = jr.list_journals(d)
    if json_out:
        _print_json([{"id": j.id, "time": j.header["time"], "status": j.status,
                      "rolled_back": j.rolled_back, "changes": len(j.entries),
                      "instances": j.header.get("instances", []),
                      "argv": j.header.get("argv", [])} for j in js])
        return
    if not js:
        print("no applies recorded")
    for j in js:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.header["time"]))
        rb = "rolled back" if j.rolled_back else "active"
        print(f"{j.id}  {when}  {j.status:<14} {rb:<11} {len(j.entries):>3} changes  "
              f"{' '.join(j.header.get('instances', []))}")


@app.command()
def validate(
    db: Annotated[str, typer.Option(help="Engine to benchmark: postgres or mysql (a scratch "
                                    "MariaDB server).")] = "postgres",
    duration: Annotated[str, typer.Option(
        help="Time budget for the runs (loading the data comes on top), e.g. 90s, 10m, 1h.")]
    = "10m",
    bench: Annotated[Optional[str], typer.Option(
        help="pgbench (postgres) or tpcc (hpadvise's TPC-C for sysbench; postgres and mysql) "
             "[default: pgbench for postgres, tpcc for mysql].")] = None,
    workload: Annotated[Optional[str], typer.Option(
        help="The benchmark's workload: pgbench select (select-only) or tpcb; tpcc has one "
             "[default: the benchmark's first: select, tpcc].")] = None,
    variants: Annotated[Optional[str], typer.Option(
        help="Comma-separated: current, recommended, thp-always, thp-never, thp-shmem, "
             "hugepages-off, hugepages-1g [default: current,recommended,thp-never,thp-always]. "
             "A variant named twice is an A/A run (the second is labelled name#2).")]
    = None,
    design: Annotated[str, typer.Option(
        help="restart (every run restarts the server in its variant), resident (one server "
             "per variant, alternating runs), simultaneous (one server per variant, measured "
             "at once on their own CPUs) or auto: simultaneous where every variant is a "
             "per-server setting and memory and CPUs allow, else restart.")] = "auto",
    rounds: Annotated[Optional[int], typer.Option(
        help="Runs of every variant per server start, resident and simultaneous designs "
             "[default: 2, or one per variant when simultaneous].")] = None,
    swap_seconds: Annotated[Optional[float], typer.Option(
        help="Simultaneous design: the servers trade CPUs this often within a run, 0 never "
             "[default: about 3, cutting the run into equal pieces on every CPU].")] = None,
    clients: Annotated[int, typer.Option(help="Clients (pgbench -c, sysbench --threads).")] = 16,
    scale: Annotated[Optional[int], typer.Option(
        help="pgbench scale or TPC-C warehouses [default: what fits in the buffers].")] = None,
    run_seconds: Annotated[Optional[int], typer.Option(
        help="Length of one measured run [default: 30, less if the budget is short].")] = None,
    warmup_seconds: Annotated[Optional[int], typer.Option(
        help="Warm-up before each measured run, same connections, left out of the figures "
             "[default: 3 + 1 per GiB of buffers, at most 20].")] = None,
    buffers: Annotated[Optional[str], typer.Option(
        "--buffers", "--shared-buffers",
        help="The scratch server's buffers: shared_buffers (postgres) or innodb_buffer_pool_size "
             "(mysql) [default: those of the largest running instance of the engine, capped "
             "by available memory; 1GB when none runs].")] = None,
    target_ci: Annotated[Optional[str], typer.Option(
        help="Stop early once every comparison's 95% CI half-width is this small [default: "
             "use the whole budget]. An interval stopped on its own width covers less than "
             "95% (90-95% in a simulation of this rule).")] = None,
    band: Annotated[str, typer.Option(help="Noise band for the verdict words.")] = "1%",
    profile: Annotated[str, typer.Option(help="Profile for the recommended variant.")] = "oltp",
    instance: Annotated[Optional[str], typer.Option(
        help="Benchmark this running instance (in a scratch database validate creates and "
             "drops) instead of a scratch cluster.")] = None,
    allow_restart: Annotated[bool, typer.Option(
        "--allow-restart", help="Let validate restart --instance between variants.")] = False,
    scratch: Annotated[bool, typer.Option(
        "--scratch", help="Use a scratch cluster (the default).")] = False,
    report: Annotated[Optional[str], typer.Option(help="Write an HTML report here.")] = None,
    fmt: ValidateFormat = Format2.table,
    json_out: JsonOpt = False,
    output: ValidateOutput = None,
):
    """Prove the plan: pgbench or TPC-C A/B runs on a scratch server, with and without huge
    pages and THP, blocked and interleaved, with a paired 95% CI and a verdict. Restores every
    knob.

    Examples:

      hpadvise validate --duration 10m --buffers 8GB --report hp.html

      hpadvise validate --duration 2m --variants current,recommended --workload tpcb

      hpadvise validate --variants hugepages-off,current --design simultaneous --duration 10m

      hpadvise validate --variants recommended,recommended --band 2% --duration 10m

      hpadvise validate --db mysql --bench tpcc --duration 10m --buffers 4GB

      hpadvise validate --db postgres --bench tpcc --duration 5m
    """
    import json

    from .benchmarks import report as rep
    from .benchmarks.options import Options
    from .benchmarks.runner import Validation
    from .benchmarks.variants import DEFAULT_VARIANTS, parse_duration

    from .engines import registry
    names = registry.resolve([db]) or []
    if len(names) != 1:
        raise InputError(f"--db {db}: validate benchmarks one engine; name it (postgres, mysql)")
    db = names[0]
    opts = Options(db=db, bench=bench or "",
        variants=[v.strip() for v in variants.split(",")] if variants else list(DEFAULT_VARIANTS),
        duration_s=parse_duration(duration), workload=workload, clients=clients, scale=scale,
        run_s=run_seconds, warm_s=warmup_seconds,
        target_ci_pct=_pct(target_ci, "--target-ci") if target_ci is not None else None,
        band_pct=_pct(band, "--band"), buffers=buffers, profile=profile,
        instance=instance, allow_restart=allow_restart, design=design, rounds=rounds,
        swap_s=swap_seconds)
    if scratch and instance:
        raise InputError("--scratch and --instance exclude each other")
    form = _fmt(fmt, json_out)
    if output and form != "json":
        raise InputError("--output writes the JSON result: add --json")
    to_stdout = form == "json" and not output
    console = _console(stderr=to_stdout)
    live = rep.LiveStatus(console)
    from .benchmarks.switching import ValidateError
    val = Validation(opts, on_update=live.update)
    try:
        val.run()
    except ValidateError as exc:  # everything is restored by now
        live.stop()
        print(f"hpadvise: error: {exc}; every knob is restored", file=sys.stderr)
        raise typer.Exit(1) from None
    finally:
        live.stop()
    result = val.result()
    rep.render_terminal(result, console)
    if report:
        with open(report, "w") as f:
            f.write(rep.render_html(result))
        console.print(f"report: {report}")
    if form == "json":
        _emit(json.dumps(result, indent=2, default=str) + "\n", output)
    for e in result["meta"].get("restore_errors", []):
        print(f"hpadvise: error: could not restore {e}", file=sys.stderr)
    if result["meta"].get("restore_errors"):
        raise typer.Exit(1)
    if val.failed:
        print(f"hpadvise: error: {val.failed}; every knob is restored", file=sys.stderr)
        raise typer.Exit(1)
    if val.interrupted:
        raise typer.Exit(130)


def _console(stderr: bool = False, file=None):
    """Rich falls back to 80 columns when it does not write to a terminal (a pipe, `tee`, a CI
    log, a file) and then wraps the tables cell by cell; 120 columns fit them. COLUMNS still
    wins."""
    import os

    from rich.console import Console
    stream = file or (sys.stderr if stderr else sys.stdout)
    wide = not stream.isatty() and not os.environ.get("COLUMNS")
    return Console(stderr=stderr, file=file, width=120 if wide else None)


def _pct(text: str, what: str) -> float:
    try:
        v = float(text.rstrip("%"))
    except ValueError:
        raise InputError(f"{what} {text!r} is not a percentage; write it like 1% or 0.5%") \
            from None
    if v <= 0:
        raise InputError(f"{what} must be positive")
    return v




def _ask_instance(cands):
    for n, i in enumerate(cands, 1):
        print(f"  {n}) {i.id}  {i.label}")
    n = typer.prompt("Which instance", type=int)
    if not 1 <= n <= len(cands):
        raise InputError(f"choose a number from 1 to {len(cands)}")
    return cands[n - 1]


def _print_json(obj) -> None:
    import json
    print(json.dumps(obj, indent=2, default=str))


@app.command("size", context_settings={"ignore_unknown_options": True})
def size_cmd(
    spec: Annotated[list[str], typer.Argument(
        metavar="ENGINE [SETTING=VALUE ...] [+ ENGINE ...]",
        help="An engine and its planned settings; several engines separated by + give one "
             "plan. JVM flags go after --.")],
    root: Annotated[str, typer.Option(help="Judge the target host from this snapshot "
                                      "(`hpadvise snapshot`) instead of this one.")] = "/",
    version: Annotated[Optional[str], typer.Option(
        "--version", help="The engine version to ask (PostgreSQL: another installed major).")]
    = None,
    profile: Annotated[str, typer.Option(help="Profile name or .toml path.")] = "oltp",
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
):
    """Size a configuration that is not deployed yet, and judge the host for it: fits / fits
    after a boot-time reservation / does not fit, the pool to set and what it leaves for the
    OS. Changes nothing.

    Examples:

      hpadvise size postgres shared_buffers=64GB max_connections=500 huge_page_size=2MB

      hpadvise size mysql innodb_buffer_pool_size=48G key_buffer_size=64M

      hpadvise size jvm -- -Xmx16g -XX:+UseLargePages -XX:ReservedCodeCacheSize=240m

      hpadvise size postgres shared_buffers=8GB + jvm -Xmx4g --root /srv/audit/db7
    """
    from . import host as host_mod
    from . import profiles, whatif
    from .engines import registry
    from .sysroot import SysRoot, snapshot_root

    form = _fmt(fmt, json_out)
    args = [a for a in spec if a != "--"]
    wanted = whatif.groups(args)
    host = host_mod.collect(SysRoot(snapshot_root(root)))
    prof = profiles.load(profile, registry.profile_schemas())
    r = whatif.size(host, wanted, prof, version)
    verdicts = whatif.verdicts(r)
    if form == "json":
        from dataclasses import asdict
        _print_json({"instances": [{"engine": i.engine, "id": i.id, "label": i.label,
                                    "version": i.version, "demand": asdict(i.demand)}
                                   for i in r.instances],
                     "pools": [asdict(v) for v in verdicts],
                     "findings": [asdict(f) for f in r.findings],
                     "changes": [asdict(c) for c in r.changes if c.kind == "setting"]})
        return
    from rich.table import Table

    from .sizing import fmt_bytes, fmt_page
    console = _console()
    t = Table("planned", "pages", "count", box=None)
    for i in r.instances:
        d = i.demand
        t.add_row(i.label, ", ".join(f"{n} x {fmt_page(kb)}" for kb, n in sorted(d.pages.items())),
                  ("exact: " if d.exact else "estimate: ") + d.source)
    console.print(t)
    for v in verdicts:
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


@app.command("report")
def report_cmd(
    paths: Annotated[list[str], typer.Argument(
        metavar="PATH...", help="`check --json` outputs, snapshots, or directories of them.")],
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
    html: Annotated[Optional[str], typer.Option(help="Also write an HTML page here.")] = None,
):
    """One table for many hosts, worst first: instances, how many run on huge pages, pool
    short or unused, THP conflicts, crit/warn counts. Changes nothing.

    Examples:

      hpadvise report reports/*.json

      hpadvise report /srv/audit/ --html fleet.html
    """
    from . import fleet
    form = _fmt(fmt, json_out)
    rs = fleet.rows(paths)
    if html:
        _emit(fleet.to_html(rs), html)
    if form == "json":
        print(fleet.to_json(rs))
        return
    from rich.table import Table
    t = Table("host", "worst", "crit", "warn", "instances", "on huge pages", "pool",
              "THP conflicts", box=None)
    for r in rs:
        t.add_row(r.host, r.worst, str(r.crit), str(r.warn), ", ".join(r.instances) or "-",
                  f"{r.on_huge_pages} of {r.running}", r.pool, str(r.thp_conflicts))
    _console().print(t)


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
    from . import probe
    from .sizing import fmt_bytes, parse_bytes
    form = _fmt(fmt, json_out)
    if accesses < 100_000 or runs < 1:
        raise InputError("--accesses: give at least 100000; --runs: at least 1")
    from .sysroot import SysRoot
    if size:
        from .host import collect
        nbytes = parse_bytes(size, "--size")
        host = collect(SysRoot("/"))
    else:  # the planned pools' size; the plan's host facts serve the probe too
        from .pipeline import inspect
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
        _print_json({**asdict(res), "saving_ns": res.saving_ns(),
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


@app.command("k8s")
def k8s(
    db: Annotated[Optional[list[str]], typer.Option(
        help="Only these engines (repeatable); default: every installed engine.")] = None,
    instance: Annotated[Optional[list[str]], typer.Option(
        help="Only this instance: ID as `check` shows it, data directory or port "
             "(repeatable).")] = None,
    pgdata: Annotated[Optional[list[str]], typer.Option(
        help="Size a stopped PostgreSQL cluster in this data directory (repeatable).")] = None,
    pods: Annotated[int, typer.Option(help="Pods of this kind a node must hold.")] = 1,
    profile: Annotated[str, typer.Option(help="Profile name or .toml path.")] = "oltp",
):
    """Kubernetes resources for each instance on huge pages: hugepages-2Mi or hugepages-1Gi
    with request = limit = its exact pages, memory for the rest of the server, the server's
    settings, and the node pool for N such pods. Changes nothing.

    Examples:

      hpadvise k8s --db postgres

      hpadvise k8s --pgdata /srv/pg/16/main --pods 3 > cluster-resources.yaml
    """
    from . import k8s as k8s_mod
    from .engines import Targets
    from .pipeline import inspect, select
    from .procs import ProcTable
    from .sysroot import SysRoot

    if pods < 1:
        raise InputError(f"--pods {pods}: a node holds at least 1 pod; give 1 or more")
    sr = SysRoot("/")
    from .engines import registry
    report = inspect(sr, profile, Targets(datadirs=tuple(pgdata or ())), registry.resolve(db))
    for e in report.errors:
        raise InputError(e)
    wanted = report.instances
    if instance:
        wanted = select(report, None, instance)
    docs = [y for i in wanted if (y := k8s_mod.snippet(report, ProcTable(sr), i, pods))]
    unsized = [i.id for i in wanted if i.demand is None]
    if not docs and unsized:
        raise InputError(f"cannot size {', '.join(unsized)} as this user: run as root or as "
                         "the server's owner")
    if not docs:
        raise InputError("no instance with a huge page demand found; `hpadvise check` shows "
                         "what is there (a stopped PostgreSQL cluster: --pgdata DIR)")
    print("---\n".join(docs), end="")


@app.command("engines")
def list_engines(
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
):
    """List the installed engines, built-in and third-party, and what each supports: check
    (always), apply (settings and restarts, or the host side only) and validate (benchmarks).

    Examples:

      hpadvise engines

      hpadvise engines --json | jq -r '.[] | select(.validate != []) | .name'
    """
    from .engines import registry
    json_out = _fmt(fmt, json_out) == "json"
    rows = registry.describe()
    if json_out:
        _print_json(rows)
        return
    from rich.table import Table
    t = Table("engine", "what it sizes", "from", "apply", "validate", box=None)
    for r in rows:
        t.add_row(r["name"], r["description"], r["origin"], r["apply"],
                  ", ".join(r["validate"]) or "-")
    _console().print(t)


@app.command("profiles")
def list_profiles():
    """List the shipped profiles."""
    from . import profiles
    from .engines import registry
    for name in profiles.shipped():
        p = profiles.load(name, registry.profile_schemas())
        print(f"{name:10} {p.description}")


def main() -> None:
    try:
        code = app(prog_name="hpadvise", standalone_mode=False)
    except InputError as exc:
        print(f"hpadvise: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("hpadvise: aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        # Click's errors (a bad option or value: exit 2), as one line saying where help is.
        # Typer vendors Click from 0.28 on, so they are recognised by what they offer.
        if not (hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None),
                                                              int)):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":  # plain `hpadvise`: the help
            print(exc.format_message())
            sys.exit(0)
        msg = " ".join(exc.format_message().split())
        ctx = getattr(exc, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        print(f"hpadvise: error: {msg}{hint}", file=sys.stderr)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
