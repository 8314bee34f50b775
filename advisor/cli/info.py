"""engines and profiles: what is installed."""

from __future__ import annotations

from .app import app
from .common import Format2, JsonOpt, TableOrJson, fmt_of, print_json
from .common import console as make_console


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
    from ..engines import registry
    json_out = fmt_of(fmt, json_out) == "json"
    rows = registry.describe()
    if json_out:
        print_json(rows)
        return
    from rich.table import Table
    t = Table("engine", "what it sizes", "from", "apply", "validate", box=None)
    for r in rows:
        t.add_row(r["name"], r["description"], r["origin"], r["apply"],
                  ", ".join(r["validate"]) or "-")
    make_console().print(t)


@app.command("profiles")
def list_profiles():
    """List the shipped profiles."""
    from .. import profiles
    from ..engines import registry
    for name in profiles.shipped():
        p = profiles.load(name, registry.profile_schemas())
        print(f"{name:10} {p.description}")
