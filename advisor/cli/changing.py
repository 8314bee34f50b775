"""apply, rollback and history: the changes, journaled, and undoing them."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import typer

from ..kit.errors import InputError
from .app import app
from .common import complete_engines, ApplyFormat, Format2, JsonOpt, OutputOpt, TableOrJson, deliver, fmt_of


@app.command()
def apply(
    db: Annotated[list[str], typer.Option(
        autocompletion=complete_engines,
        metavar="ENGINE", help="Engine(s) to apply for (repeatable, or comma-separated; "
                               "mariadb is mysql), or all: one plan for every instance of "
                               "them.")],
    instance: Annotated[Optional[list[str]], typer.Option(
        metavar="ID", help="Instance ID as `check` shows it, a data directory, a port or a "
             "Debian cluster's name, 15/main (repeatable).")]
    = None,
    profile: Annotated[str, typer.Option(metavar="NAME|FILE", help="Profile name or .toml path.")] = "oltp",
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
        metavar="DIR", help="Journal directory [default: $HPADVISE_JOURNAL_DIR or /var/lib/hpadvise/journal].")]
    = None,
    output: OutputOpt = None,
    persist_root: Annotated[str, typer.Option(
        metavar="DIR", help="Write the persistent files (/etc/...) under this directory instead of /.")] = "",
    root: Annotated[str, typer.Option(
        metavar="DIR", help="Plan for the host an `hpadvise snapshot` in DIR holds, as it was "
        "then, instead of this one (with --dry-run: a snapshot cannot be changed).")] = "/",
):
    """Apply the plan for every instance of these engines (--instance narrows it): pools,
    THP, persistence, database settings, and with --restart each server restarted in turn
    (a cluster manager's replicas before its leader), stopping at the first failure.

    Every change is journaled before it is made; `hpadvise rollback` undoes it exactly.

    Examples:

    \b
      hpadvise apply --db postgres --dry-run
      hpadvise apply --db postgres --instance 5432 --restart --yes
      hpadvise apply --db postgres --print-script > hugepages.sh   # not root? hand it over
      hpadvise apply --db all --profile mixed --dry-run   # one plan for every engine found
      hpadvise apply --db postgres --db jvm --instance 5432 --instance jvm:4242 --restart
      hpadvise apply --db all --root /srv/audit/db7 --dry-run   # a snapshot's plan, offline
    """
    from ..act import applying
    from ..act import script as script_mod
    from ..api.engines import registry

    json_out = fmt_of(fmt, json_out) == "json"
    if output and not json_out:
        raise InputError("--output writes the JSON result: add --json")
    if print_script and json_out:
        raise InputError("--print-script prints a shell script; leave out --json (or use "
                         "--dry-run --json for the plan as JSON)")
    from ..facts.sysroot import snapshot_top
    if snapshot_top(root) != "/" and print_script:
        raise InputError("--print-script writes a script for this host, and a snapshot's "
                         "processes are not this host's: use --dry-run with --root")
    req = applying.Request(registry.resolve(db), list(instance or ()), profile, restart,
                           not no_persist, persist_root, read_only=dry_run or print_script,
                           journal_dir=journal_dir, root=root)
    plan = applying.plan(req)
    if print_script:
        print(script_mod.script(plan), end="")
        return
    if not json_out:
        applying.print_plan(plan, root)
    if dry_run:
        if json_out:
            deliver("json", applying.plan_json(plan, root), None, output)
        return
    if plan.changes and not yes:
        if not sys.stdin.isatty():
            raise InputError("no terminal to confirm on: add --yes to apply without asking")
        if not typer.confirm("Apply these changes?", default=False):
            raise typer.Exit(1)
    result, boot = applying.run(plan, req, say=(lambda m: None) if json_out else
                                (lambda m: print(f"  {m}", flush=True)))
    if json_out:
        deliver("json", applying.result_json(plan, result, boot), None, output)
    else:
        applying.print_result(plan, req, result, boot)
    for p in result.problems:
        print(f"hpadvise: error: {p}", file=sys.stderr)
    if result.status not in ("ok", "nothing"):
        raise typer.Exit(1)


@app.command()
def rollback(
    apply_id: Annotated[Optional[str], typer.Argument(
        help="The journaled run to undo (see `hpadvise history`); default: the latest one "
             "not rolled back.")] = None,
    journal_dir: Annotated[Optional[str], typer.Option(metavar="DIR", help="Journal directory [default: $HPADVISE_JOURNAL_DIR or /var/lib/hpadvise/journal].")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be restored and "
                                          "stop.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (at a terminal, "
                                      "rollback asks before restoring).")] = False,
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
):
    """Undo an apply exactly: every knob and file back, in reverse order; restart an instance
    the apply restarted, if it runs (a stopped one stays stopped, its settings restored). It
    also finishes what a killed capture, validate or probe left changed (they journal too).

    Examples:

    \b
      hpadvise rollback --dry-run
      hpadvise rollback 20261122-135501-4242 --yes
      hpadvise rollback --yes --json      # id, what was restored, errors
    """
    import contextlib
    import os

    from ..ledger import journal as jr
    from ..ledger.stacked import older_than_holders
    form = fmt_of(fmt, json_out)
    say = (lambda *a, **k: None) if form == "json" else print
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
        older_than_holders(d, j)
        todo = jr.plan_rollback(j)
        torn = (f"journal {j.path} ends in a torn record at line {j.torn} (the file was cut, "
                "or the apply died while writing it): what it recorded after that is lost "
                "and cannot be undone from it; compare the host with `hpadvise check`"
                ) if j.torn else None
        say(f"Rollback of {j.id} ({j.status}, {len(j.entries)} changes):")
        if torn:
            say(f"  warning: {torn}")
        for line in todo or ["nothing to restore"]:
            say(f"  {line}")
        if dry_run:
            if form == "json":
                deliver(form, {"id": j.id, "dry_run": True, "to_restore": todo,
                               "warnings": [torn] if torn else []}, None, output)
            return
        if todo and not yes and not typer.confirm("Restore these?", default=False):
            raise typer.Exit(1)
        done, errors = jr.rollback(j, say=lambda m: say(f"  {m}"))
        if torn:
            errors.append(torn)
        j.mark_rolled_back(errors)
    for x in done:
        say(f"restored: {x}")
    if not done and not errors:
        say("nothing to restore: every knob already had its old value")
    say(f"rolled back {j.id}" + (" with differences, below" if errors else ""))
    if form == "json":
        deliver(form, {"id": j.id, "dry_run": False, "restored": done, "errors": errors},
                None, output)
    for e in errors:
        print(f"hpadvise: error: {e}", file=sys.stderr)
    if errors:
        raise typer.Exit(1)


@app.command()
def history(
    journal_dir: Annotated[Optional[str], typer.Option(metavar="DIR", help="Journal directory [default: $HPADVISE_JOURNAL_DIR or /var/lib/hpadvise/journal].")] = None,
    fmt: TableOrJson = Format2.table,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
):
    """List what changed the host and its servers, and whether it was rolled back: applies,
    and the captures, validate and probe runs that journal their changes too.

    Example: hpadvise history --json | jq -r '.[] | select(.rolled_back == null) | .id'"""
    import time

    from ..ledger import journal as jr
    form = fmt_of(fmt, json_out)
    if journal_dir and not os.path.exists(journal_dir):  # a typo must not read as "none"
        raise InputError(f"--journal-dir {journal_dir}: no such directory; give the one apply "
                         "wrote to, or leave the option out for the default")
    d = jr.journal_dir(journal_dir)
    jr.readable_dir(d)
    js = jr.list_journals(d)

    def table() -> None:
        if not js:
            print("no applies recorded")
            return
        rows = [(j.id, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.header["time"])),
                 j.status, "rolled back" if j.rolled_back else "active", str(len(j.entries)),
                 " ".join(j.header.get("instances", [])) or "-") for j in js]
        head = ("id", "time", "status", "state", "changes", "instances")
        # every column as wide as its widest cell, whatever the ids' lengths; the count
        # right-aligned, the last column unpadded
        w = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        for r in [head, *rows]:
            print("  ".join([*(c.ljust(w[i]) for i, c in enumerate(r[:4])), r[4].rjust(w[4]),
                             r[5]]))
    deliver(form, [{"id": j.id, "time": j.header["time"], "status": j.status,
                    "rolled_back": j.rolled_back, "changes": len(j.entries),
                    "instances": j.header.get("instances", []),
                    "argv": j.header.get("argv", [])} for j in js], table, output)
