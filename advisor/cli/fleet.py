"""report: many hosts' check reports in one table."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .app import app
from .common import Format2, HtmlOpt, JsonOpt, OutputOpt, TableOrJson, deliver, emit, fmt_of
from .common import console as make_console


@app.command("report")
def report_cmd(
    paths: Annotated[list[str], typer.Argument(
        metavar="PATH...", help="`check --json` outputs, snapshots, or directories of them.")],
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
    html: HtmlOpt = None,
    output: OutputOpt = None,
):
    """One table for many hosts: the newest check of each (by the time it carries), failed
    and partial checks first, then worst first; crit/warn counts, how many instances run on
    huge pages, the pool and THP values to set and the worst finding. --json and --html add
    the instances, the pool's shortfall or unused pages, THP conflicts and when each host
    was checked. Changes nothing.

    Examples:

    \b
      hpadvise report reports/*.json
      hpadvise report /srv/audit/ --html fleet.html
    """
    from ..outputs import fleet
    form = fmt_of(fmt, json_out)
    rs = fleet.rows(paths)
    if html:
        emit(fleet.to_html(rs), html, "--html")
    import json
    deliver(form, json.loads(fleet.to_json(rs)), lambda: fleet.render(rs, make_console()),
            output)
