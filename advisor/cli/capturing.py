"""capture: record a running server's statements for `validate --replay`."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Annotated, Optional

import typer

from ..kit.errors import InputError
from .app import app
from .common import complete_engines


@app.command()
def capture(
    instance: Annotated[str, typer.Option(
        metavar="ID", help="The running instance to record: its ID as `hpadvise check` lists it, "
             "data directory, port, or a Debian cluster's name (15/main).")],
    output: Annotated[str, typer.Option(
        "--output", "-o", metavar="DIR", help="A new directory for the capture (created "
             "0700: a statement log holds data).")],
    duration: Annotated[str, typer.Option(
        metavar="DURATION", help="How long to record, e.g. 90s, 5m.")] = "5m",
    db: Annotated[str, typer.Option(autocompletion=complete_engines, metavar="ENGINE", help="The instance's engine.")]
    = "postgres",
    no_base: Annotated[bool, typer.Option(
        "--no-base", help="Skip the base backup taken before the log (then replay it with "
             "validate --instance ID --copy, on data newer than the log).")] = False,
    journal_dir: Annotated[Optional[str], typer.Option(
        metavar="DIR", help="Journal directory (the settings changed are journaled there: "
             "`hpadvise rollback` undoes a capture that was killed).")] = None,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Capture also where the statements stay in the server's own "
             "log after the capture (no logging collector: its stderr file).")] = False,
):
    """Record a running server's statements for `validate --replay`: a base backup first,
    then every statement for DURATION (the logging settings pgreplay needs, set with ALTER
    SYSTEM and a reload, journaled, and put back at the end, also on Ctrl-C). Nothing is
    restarted.

    Examples:

    \b
      hpadvise capture --instance main --duration 5m --output /var/tmp/cap
      hpadvise validate --replay /var/tmp/cap --duration 20m --html replay.html
    """
    from ..ledger import journal as jr
    from ..benchmarks.variants import parse_duration
    from ..api.engines import Targets, registry
    from ..planning.pipeline import inspect, select
    from ..facts.sysroot import SysRoot
    seconds = parse_duration(duration)
    if not output.strip():
        raise InputError("--output: empty; name a new directory")
    out = os.path.abspath(output)
    if os.path.lexists(out):
        raise InputError(f"--output {output}: exists already; name a new directory")
    if not os.path.isdir(os.path.dirname(out)):
        raise InputError(f"--output {output}: its parent directory does not exist")
    if os.geteuid() != 0:
        raise InputError("capture changes the server's logging settings and reads its log: "
                         "run it as root (sudo)")
    engine = registry.get(db)
    report = inspect(SysRoot("/"), "oltp", Targets(), [engine.name])
    try:
        inst = select(report, [engine.name], [instance])[0]
    except InputError:
        if stopped := engine.not_running(instance):  # a stopped server's data directory
            raise InputError(f"{stopped}; start it and capture again") from None
        raise
    if not inst.running:
        raise InputError(f"instance {inst.id} is not running; start it and capture again")
    print("hpadvise: warning: " + engine.capture_privacy(out), file=sys.stderr)
    tty = sys.stderr.isatty()
    last = [0.0]

    def progress(text: str) -> None:
        if tty:
            print(f"\r{text}   ", end="", file=sys.stderr, flush=True)
        elif time.time() - last[0] >= 10:
            last[0] = time.time()
            print(text, file=sys.stderr, flush=True)

    def on_term(signum, frame):
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, on_term)
    interrupted = False
    try:
        meta = engine.capture(inst, out, seconds, jr.journal_dir(journal_dir), not no_base,
                              say=print, progress=progress, yes=yes)
    except KeyboardInterrupt:
        interrupted, meta = True, None
    finally:
        signal.signal(signal.SIGTERM, old)
        if tty:
            print(file=sys.stderr)
    if meta is None:
        print(f"hpadvise: capture interrupted; {_left(out)}", file=sys.stderr)
        raise typer.Exit(130)
    print(f"captured {meta.get('bytes', 0) / 1e6:,.1f} MB of statement log in {out} "
          f"({meta['log'].rsplit('/', 1)[-1]}"
          + (", with the base backup taken before it)" if meta.get("base") else ")"))
    print(f"replay it: hpadvise validate --replay {out}")
    for e in meta.get("restore_errors") or []:
        print(f"hpadvise: error: could not restore {e}", file=sys.stderr)
    if meta.get("restore_errors") or interrupted:
        raise typer.Exit(1)


def _left(out: str) -> str:
    """What an interrupted capture left, as it reads now: only what happened is said."""
    import json
    try:
        with open(os.path.join(out, "capture.json")) as f:
            errors = json.load(f).get("restore_errors")
    except (OSError, ValueError):
        return ("nothing was recorded and no setting was changed" if not os.path.exists(out)
                else f"what was recorded is in {out}")
    if errors:
        return ("could not put back " + "; ".join(map(str, errors))
                + f"; what was recorded is in {out}")
    return f"the logging settings are put back; what was recorded is in {out}"
