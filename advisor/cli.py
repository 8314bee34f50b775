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
        from rich.console import Console

        from .render import render
        render(report, Console(), verbose)
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
