"""hpadvise command line: parse, call the library, render. Nothing else lives here."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from .errors import InputError

app = typer.Typer(
    help="Database-focused huge page advisor: size static huge page pools exactly for "
         "PostgreSQL and friends, and set THP the way each engine needs.",
    no_args_is_help=True, add_completion=False, rich_markup_mode=None,
    # A crash must not print local variables: they can hold a DSN with its password.
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class FailOn(str, Enum):
    none = "none"
    warn = "warn"
    crit = "crit"


@app.command()
def check(
    json_out: Annotated[bool, typer.Option("--json", help="Print the versioned JSON report "
                                           "(docs/json-schema.md) instead of tables.")] = False,
    fail_on: Annotated[FailOn, typer.Option(help="Exit 1 when a finding is this severe or worse "
                                            "(for audit pipelines).")] = FailOn.none,
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

      hpadvise check --pgdata /srv/pg/16/main      # plan before the first start

      hpadvise check --dsn 'postgresql://app@db1:5432/postgres'
    """
    from .engines import Targets
    from .plan import inspect
    from .sysroot import SysRoot

    report = inspect(SysRoot(root), profile, Targets(tuple(dsn or ()), tuple(pgdata or ())), db)
    if json_out:
        from .render import to_json
        print(to_json(report))
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
):
    """Capture every file `check` reads into DIRECTORY, for offline audits (`check --root`)
    and test fixtures. Example: hpadvise snapshot /tmp/host-a"""
    from .engines import Targets
    from .plan import inspect
    from .snapshot import write_snapshot
    from .sysroot import SysRoot

    sr = SysRoot("/", record=True)
    inspect(sr, targets=Targets(datadirs=tuple(pgdata or ())))
    n = write_snapshot(sr, directory)
    print(f"wrote {n} files to {directory}")


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
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
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
    from .plan import build, inspect
    from .sysroot import SysRoot

    if os.geteuid() != 0 and not (dry_run or print_script):
        raise InputError("apply changes kernel settings and needs root; run it with sudo, or "
                         "use --print-script to hand the changes to someone who is root")
    report = inspect(SysRoot("/"), profile, Targets(), None)
    engines = report.engines
    names = sorted(engines) if db == ["all"] else db
    for n in names:
        if n not in engines:
            raise InputError(f"no engine named {n!r} is installed "
                             f"(installed: {', '.join(sorted(engines))})")
    ask = None if (yes or not sys.stdin.isatty()) else _ask_instance
    selected = ap_mod.select_instances(report, names, instance, ask)
    if not selected:
        raise InputError(f"no running or named {'/'.join(names)} instance found; "
                         "`hpadvise check` shows what is there")
    report = build(report.host, selected, report.profile, engines)
    plan = ap_mod.prepare(report, engines, restart=restart, persist=not no_persist,
                          persist_root=persist_root)
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
            _print_json({"dry_run": True, "changes": lines, "notices": plan.notices})
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
    if json_out:
        _print_json({"status": result.status, "journal": result.journal, "done": result.done,
                     "problems": result.problems, "notices": plan.notices,
                     "restart_needed": plan.restart_pending})
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
    import os

    from . import journal as jr
    d = jr.journal_dir(journal_dir)
    if os.geteuid() != 0 and not dry_run:
        raise InputError("rollback changes kernel settings and needs root; run it with sudo "
                         "(--dry-run shows what it would restore)")
    jr.open_dir(d)
    with jr.Lock(d):
        j = jr.find(d, apply_id)
        if j.rolled_back is not None:
            raise InputError(f"apply {j.id} is already rolled back")
        todo = jr.plan_rollback(j)
        print(f"Rollback of {j.id} ({j.status}, {len(j.entries)} changes):")
        for line in todo or ["nothing to restore"]:
            print(f"  {line}")
        if dry_run:
            return
        if todo and not yes and sys.stdin.isatty() \
                and not typer.confirm("Restore these?", default=False):
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
):
    """List applies and whether they were rolled back."""
    import time

    from . import journal as jr
    js = jr.list_journals(jr.journal_dir(journal_dir))
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
    workload: Annotated[str, typer.Option(help="tpcb or select (select-only).")] = "select",
    variants: Annotated[Optional[str], typer.Option(
        help="Comma-separated: current, recommended, thp-always, thp-never, hugepages-off "
             "[default: current,recommended,thp-never,thp-always].")] = None,
    clients: Annotated[int, typer.Option(help="Clients (pgbench -c, sysbench --threads).")] = 16,
    scale: Annotated[Optional[int], typer.Option(
        help="pgbench scale or TPC-C warehouses [default: what fits in the buffers].")] = None,
    run_seconds: Annotated[Optional[int], typer.Option(
        help="Length of one measured run [default: 30, less if the budget is short].")] = None,
    warmup_seconds: Annotated[Optional[int], typer.Option(
        help="Warm-up before each measured run, same connections, left out of the figures "
             "[default: 3 + 1 per GiB of buffers, at most 20].")] = None,
    shared_buffers: Annotated[str, typer.Option(
        help="The scratch server's shared_buffers (postgres) or innodb_buffer_pool_size (mysql).")]
    = "1GB",
    target_ci: Annotated[str, typer.Option(
        help="Stop when every comparison's 95% CI half-width is this small.")] = "1%",
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
    json_out: Annotated[Optional[str], typer.Option(
        "--json", help="Write the JSON result (every sample) to this file, - for stdout.")]
    = None,
):
    """Prove the plan: pgbench or TPC-C A/B runs on a scratch server, with and without huge
    pages and THP, blocked and interleaved, with a paired 95% CI and a verdict. Restores every
    knob.

    Examples:

      hpadvise validate --duration 10m --shared-buffers 8GB --report hp.html

      hpadvise validate --duration 2m --variants current,recommended --workload tpcb

      hpadvise validate --db mysql --bench tpcc --duration 10m --shared-buffers 4GB

      hpadvise validate --db postgres --bench tpcc --duration 5m
    """
    import json

    from .benchmarks import report as rep
    from .benchmarks.runner import DEFAULT_VARIANTS, Options, Validation, parse_duration

    if bench is None:  # the engine's first benchmark
        from .engines import registry
        bench = (registry.get(db).benches or ("",))[0]
    opts = Options(db=db, bench=bench,
        variants=[v.strip() for v in variants.split(",")] if variants else list(DEFAULT_VARIANTS),
        duration_s=parse_duration(duration), workload=workload, clients=clients, scale=scale,
        run_s=run_seconds, warm_s=warmup_seconds, target_ci_pct=_pct(target_ci, "--target-ci"),
        band_pct=_pct(band, "--band"), shared_buffers=shared_buffers, profile=profile,
        instance=instance, allow_restart=allow_restart)
    if scratch and instance:
        raise InputError("--scratch and --instance exclude each other")
    console = _console(stderr=json_out == "-")
    live = rep.LiveStatus(console)
    val = Validation(opts, on_update=live.update)
    try:
        val.run()
    finally:
        live.stop()
    result = val.result()
    rep.render_terminal(result, console)
    if report:
        with open(report, "w") as f:
            f.write(rep.render_html(result))
        console.print(f"report: {report}")
    if json_out:
        text = json.dumps(result, indent=2, default=str)
        if json_out == "-":
            print(text)
        else:
            with open(json_out, "w") as f:
                f.write(text)
    for e in result["meta"].get("restore_errors", []):
        print(f"hpadvise: error: could not restore {e}", file=sys.stderr)
    if result["meta"].get("restore_errors"):
        raise typer.Exit(1)
    if val.interrupted:
        raise typer.Exit(130)


def _console(stderr: bool = False):
    """Rich falls back to 80 columns when it does not write to a terminal (a pipe, `tee`, a CI
    log) and then wraps the tables cell by cell; 120 columns fit them. COLUMNS still wins."""
    import os

    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and not os.environ.get("COLUMNS")
    return Console(stderr=stderr, width=120 if wide else None)


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


@app.command("engines")
def list_engines(
    json_out: Annotated[bool, typer.Option("--json", help="Print the list as JSON.")] = False,
):
    """List the installed engines, built-in and third-party, and what each supports: check
    (always), apply (settings and restarts, or the host side only) and validate (benchmarks).

    Examples:

      hpadvise engines

      hpadvise engines --json | jq -r '.[] | select(.validate != []) | .name'
    """
    from .engines import registry
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
        app(standalone_mode=True)
    except InputError as exc:
        print(f"hpadvise: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
