"""engines and profiles: what is installed."""

from __future__ import annotations

from .app import app
from .common import Format2, JsonOpt, TableOrJson, fmt_of, OutputOpt, deliver
from .common import console as make_console


@app.command("engines")
def list_engines(
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
):
    """List the installed engines, built-in and third-party, and what each supports: check
    (always), apply (settings and restarts, or the host side only) and validate (benchmarks).

    Examples:

    \b
      hpadvise engines
      hpadvise engines --json | jq -r '.[] | select(.validate != []) | .name'
    """
    from ..api.engines import registry
    rows = registry.describe()

    def table() -> None:
        from rich.table import Table
        from ..kit.sizing import counted
        t = Table("engine", "what it sizes", "check finds", "apply", "validate", "from",
                  box=None)
        for r in rows:  # check reads every engine: what it looks for, and what it can say
            finds = f"{' or '.join(r['processes']) or 'no'} processes; " \
                f"{counted(r['finding_codes'], 'kind')} of finding"
            t.add_row(r["name"], r["description"], finds, r["apply"],
                      ", ".join(r["validate"]) or "-", r["origin"])
        make_console().print(t)
    deliver(fmt_of(fmt, json_out), rows, table, output)


@app.command("profiles")
def list_profiles(
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
):
    """List the shipped profiles (name and what each is for).

    Example: hpadvise profiles --json | jq -r '.[].name'"""
    from ..api import profiles
    from ..api.engines import registry
    rows = [{"name": n, "description": profiles.load(n, registry.profile_schemas()).description}
            for n in profiles.shipped()]
    deliver(fmt_of(fmt, json_out), rows,
            lambda: [print(f"{r['name']:10} {r['description']}") for r in rows], output)
