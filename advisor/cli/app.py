"""The typer application and the entry point; every command lives in a module of its own
in this package and registers itself on `app`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
import typer.main

from ..kit.errors import InputError

app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None,
    # A crash must not print local variables: they can hold a DSN with its password.
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from ..facts.dists import version
        print(f"hpadvise {version('hpadvise') or 'unknown'}")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the version and exit.")] = False) -> None:
    """Database-focused huge page advisor: size static huge page pools exactly for
    PostgreSQL and friends, and set THP the way each engine needs."""


def _engine_options(group, argv: list[str]) -> None:
    """Each engine's own options (Engine.options) on the commands they name, added before the
    command line is parsed, and only when the command run takes some: other commands do not
    load the engines. The values are kept for `common.targets`."""
    from .common import ENGINE_OPTIONS
    ENGINE_OPTIONS.clear()
    name = next((a for a in argv if not a.startswith("-")), None)
    command = group.commands.get(name) if name else None
    if command is None:
        return
    from typer.core import TyperOption

    from ..api.engines import registry

    def store(ctx, param, value):
        if value:
            ENGINE_OPTIONS[param.name] = tuple(value)
        return value
    for eng, opt in registry.options(name):
        command.params.append(TyperOption(
            param_decls=[opt.flag, opt.key], multiple=True, metavar=opt.metavar,
            expose_value=False, callback=store, help=f"{opt.help} (engine {eng})"))


def command_group():
    """The click group of every registered command, as typer builds it."""
    _annotations_evaluated()
    group = typer.main.get_command(app)
    from .exits import ANY, EXITS, exit_codes
    for name, cmd in group.commands.items():  # the help's last words
        if name in EXITS:
            cmd.epilog = f"Exit codes: {exit_codes(name)}"
    group.epilog = f"Exit codes: each command's help gives its own. {ANY}"
    return group


def _annotations_evaluated() -> None:
    """Python 3.9: every command's annotations as objects. This package's modules keep their
    annotations as strings (`from __future__ import annotations`); typer evaluates them only
    on Python 3.10 and later (inspect.signature's eval_str), and on 3.9 would take every
    option for a plain parameter named after its variable. Each string is evaluated in its
    module, as written (typing.get_type_hints on 3.9 would wrap an Annotated whose default is
    None in Optional[], where typer no longer finds the option)."""
    if sys.version_info >= (3, 10):
        return
    import inspect
    funcs = [c.callback for c in app.registered_commands]
    if app.registered_callback is not None:
        funcs.append(app.registered_callback.callback)
    for f in funcs:
        if f is None or "__signature__" in vars(f):
            continue
        sig = inspect.signature(f)

        def evaluated(a, f=f):
            return eval(a, f.__globals__) if isinstance(a, str) else a  # noqa: S307
        f.__signature__ = sig.replace(
            parameters=[p.replace(annotation=evaluated(p.annotation))
                        for p in sig.parameters.values()],
            return_annotation=evaluated(sig.return_annotation))


def main(argv: list[str] | None = None) -> None:
    """The console script: run one command line (default: this process's) and exit."""
    argv = sys.argv[1:] if argv is None else argv
    import os

    from ..kit.secrets import ScrubbedStream, remember_environ
    # The one secrets filter: everything printed, by whatever code, goes through it.
    remember_environ(dict(os.environ))
    if not isinstance(sys.stdout, ScrubbedStream):
        sys.stdout, sys.stderr = ScrubbedStream(sys.stdout), ScrubbedStream(sys.stderr)
    try:
        group = command_group()
        _engine_options(group, argv)
        code = group.main(args=argv, prog_name="hpadvise", standalone_mode=False)
    except InputError as exc:
        print(f"hpadvise: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except SystemExit as exc:
        # Click ends a command whose stdout was closed (EPIPE) with exit 1, after wrapping
        # stdout in its PacifyFlushWrapper: that is the closed pipe below, not a failure.
        if exc.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            sys.exit(0)
        raise
    except BrokenPipeError:  # a plain print into a closed pipe: see common._closed
        from .common import _closed
        _closed()
    except (typer.Abort, KeyboardInterrupt):
        print("hpadvise: aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        # Click's errors (a bad option or value: exit 2), as one line saying where help is.
        # Typer vendors Click from 0.28 on, so they are recognised by what they offer.
        if not (hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None),
                                                              int)):
            if os.environ.get("HPADVISE_DEBUG"):
                raise
            # A bug, not the user's input: one line (through the secrets filter like all
            # output), and the way to the traceback.
            text = " ".join(str(exc).split())[:300]
            print(f"hpadvise: internal error: {type(exc).__name__}: {text} (a bug in hpadvise; "
                  "HPADVISE_DEBUG=1 shows the traceback)", file=sys.stderr)
            sys.exit(70)
        if type(exc).__name__ == "NoArgsIsHelpError":  # plain `hpadvise`: the help
            print(exc.format_message())
            sys.exit(0)
        # click joins its suggestion on with a space: "No such option: --x Did you mean --y?"
        msg = " ".join(exc.format_message().split()).replace(" Did you mean",
                                                             ". Did you mean")
        ctx = getattr(exc, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        print(f"hpadvise: error: {msg}{hint}", file=sys.stderr)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
