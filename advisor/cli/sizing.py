"""size: a configuration that is not deployed yet, judged against a host."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .app import app
from .common import Format2, JsonOpt, OutputOpt, TableOrJson, deliver, fmt_of, targets
from .common import console as make_console


@app.command("size", context_settings={"ignore_unknown_options": True})
def size_cmd(
    ctx: typer.Context,
    spec: Annotated[list[str], typer.Argument(
        metavar="ENGINE [SETTING=VALUE ...] [+ ENGINE ...]",
        help="An engine and its planned settings; several engines separated by + give one "
             "plan. JVM flags go after --.")],
    root: Annotated[str, typer.Option(metavar="DIR", help="Judge the target host from this snapshot "
                                      "(`hpadvise snapshot`) instead of this one.")] = "/",
    version: Annotated[Optional[str], typer.Option(
        "--server-version", metavar="MAJOR",
        help="The server version to ask (PostgreSQL: another installed major).")] = None,
    profile: Annotated[str, typer.Option(metavar="NAME|FILE", help="Profile name or .toml path.")] = "oltp",
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
):
    """Size a configuration that is not deployed yet, and judge the host for it: fits / fits
    after a boot-time reservation / does not fit, the pool to set and what it leaves for the
    OS. Changes nothing.

    Examples:

    \b
      hpadvise size postgres shared_buffers=64GB max_connections=500 huge_page_size=2MB
      hpadvise size mysql innodb_buffer_pool_size=48G key_buffer_size=64M
      hpadvise size jvm -- -Xmx16g -XX:+UseLargePages -XX:ReservedCodeCacheSize=240m
      hpadvise size --root /srv/audit/db7 postgres shared_buffers=8GB + jvm -- -Xmx4g
    """
    from ..facts import host as host_mod
    from ..api import profiles
    from ..outputs import whatif
    from ..api.engines import registry
    from ..facts.sysroot import SysRoot, snapshot_root

    form = fmt_of(fmt, json_out)
    args = [a for a in spec if a != "--"]
    wanted = whatif.groups(args)
    # unknown options pass through as arguments (a JVM's flags); where an engine is due, one
    # is an option of size's that does not exist, said as Click says it for every command
    for name, _ in wanted:
        if name.startswith("-"):
            ctx.fail(f"No such option: {name}")
    host = host_mod.collect(SysRoot(snapshot_root(root)))
    prof = profiles.load(profile, registry.profile_schemas())
    r = whatif.size(host, wanted, prof, version, targets())
    deliver(form, whatif.to_json(r), lambda: whatif.render(r, make_console()), output)
    short = [v for v in whatif.verdicts(r) if v.verdict == whatif.WORDS["does_not_fit"]]
    if short:
        import sys
        from ..kit.sizing import fmt_page
        print("hpadvise: " + "; ".join(f"the {fmt_page(v.size_kb)} pool ({v.pages} pages) does "
                                       "not fit" for v in short), file=sys.stderr)
        raise typer.Exit(1)
