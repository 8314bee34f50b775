"""What every command shares: output formats, `--json`, writing a report to a file, the
console, and reading percentages."""

from __future__ import annotations

import math
import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from ..kit.errors import InputError


class Format(str, Enum):
    table = "table"
    json = "json"
    prometheus = "prometheus"


class Format2(str, Enum):
    """The formats of commands that have no metrics to export."""
    table = "table"
    json = "json"


def fmt_of(fmt: Format | Format2, json_out: bool,
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


def emit(text: str, output: str | None, what: str = "--output") -> None:
    """Print, or replace FILE atomically: a reader such as node_exporter's textfile collector
    never sees half a file. Only a regular file is written (files.target)."""
    if not output or output == "-":
        sys.stdout.write(text)
        return
    import os

    from ..kit.files import write_atomic
    try:
        write_atomic(output, text.encode())
    except OSError as exc:
        where = os.path.dirname(os.path.abspath(output))
        raise InputError(f"{what} {output}: cannot write in {where}: {exc.strerror}") \
            from None


def output_path(value: str | None, what: str = "--output") -> str | None:
    """An output file checked when the command line is read, before any work: a regular file
    or a new one in an existing directory ("-" is stdout)."""
    if value is None or value == "-":
        return value
    from ..kit.files import target
    target(value, what)
    return value


def _output_callback(ctx, param, value):
    return output_path(value, param.opts[0] if param is not None and param.opts else "--output")


# `--json`, alike on every command that reports: the short form of `--format json`.
JsonOpt = Annotated[bool, typer.Option("--json", help="Short for --format json.")]


def format_opt(kind: type[Enum], help: str):
    """`--format` of a command that reports, with its formats and what they give."""
    return Annotated[kind, typer.Option("--format", case_sensitive=False, help=help)]


TableOrJson = format_opt(Format2, "table or json.")
CheckFormat = format_opt(Format, "table, json (the versioned report: docs/json-schema.md) or "
                          "prometheus (node_exporter textfile format).")
ApplyFormat = format_opt(Format2, "table, or json: each change with target, before, after "
                          "and status.")
ValidateFormat = format_opt(Format2, "table, or json: the result with every sample (progress "
                             "and tables then go to stderr unless --output is given).")
CheckOutput = Annotated[Optional[str], typer.Option(
    metavar="FILE", callback=_output_callback,
    help="Write the report to FILE (replaced atomically) instead of printing it.")]
# `--output FILE`, alike on every command that reports.
OutputOpt = Annotated[Optional[str], typer.Option(
    "--output", metavar="FILE", callback=_output_callback,
    help="Write what it prints to FILE (replaced atomically).")]
# `--html FILE` on report: checked before any work, as --output is.
HtmlOpt = Annotated[Optional[str], typer.Option(
    "--html", metavar="FILE", callback=_output_callback, help="Also write an HTML page here.")]
ValidateOutput = Annotated[Optional[str], typer.Option(
    metavar="FILE", callback=_output_callback,
    help="Write the JSON result to FILE (replaced atomically).")]


class FailOn(str, Enum):
    none = "none"
    warn = "warn"
    crit = "crit"


def console(stderr: bool = False, file=None):
    """Rich falls back to 80 columns when it does not write to a terminal (a pipe, `tee`, a CI
    log, a file) and then wraps the tables cell by cell; 120 columns fit them. COLUMNS still
    wins. No automatic highlighting: the tables carry their own styles, and rich's
    highlighter compiles a large regular expression at the first print (~15 ms a run)."""
    import os

    from rich.console import Console
    stream = file or (sys.stderr if stderr else sys.stdout)
    tty = stream.isatty()
    wide = not tty and not os.environ.get("COLUMNS")
    c = _WholeWords(stderr=stderr, file=file if tty else _Trimmed(stream),
                    width=120 if wide else None, highlight=False)
    c.on_broken_pipe = _closed  # rich would exit 1: a closed pipe is no failure here
    return c


def _whole_words():
    """Rich's console, but a table is never drawn so narrow that a word in it breaks: rich
    would break a path, a version or a command inside it where the terminal is narrow, and
    what a user copies must stay whole. Where rich's own layout would, each column gets at
    least its longest word and the rest of the width in proportion to what it would take
    beyond that; a table whose words need more than the terminal is drawn that wide, and the
    terminal wraps its lines, as psql's wide rows are."""
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table

    def longest(console, column) -> int:
        cells = (column.header, *column._cells)
        return max((cell_len(w) for c in cells for w in (
            console.render_str(c).plain if isinstance(c, str) else getattr(c, "plain", "")
        ).split()), default=0)

    def fit(console, table, width: int) -> list[int] | None:
        """The columns' widths, padding included, that keep every word whole; None where
        rich's own do."""
        opts = console.options.update_width(1 << 16)
        cols = table.columns
        pads = [table._get_padding_width(n) for n in range(len(cols))]
        lo = [longest(console, c) + p for c, p in zip(cols, pads)]
        hi = [max(lo_, table._measure_column(console, opts, c).maximum)
              for lo_, c in zip(lo, cols)]
        room = width - table._extra_width
        rich = table._calculate_column_widths(console, console.options.update_width(room))
        if all(r >= lo_ for r, lo_ in zip(rich, lo)):
            return None  # rich's own layout breaks no word: kept
        spare, want = max(0, room - sum(lo)), [h - lo_ for h, lo_ in zip(hi, lo)]
        return [lo_ + spare * w // (sum(want) or 1) for lo_, w in zip(lo, want)]

    class WholeWords(Console):
        def print(self, *objects, **kw):
            width = need = self.width
            given: list = []  # (column, its own width), put back after printing
            for o in objects:
                try:  # rich's own layout where its internals are not as read here
                    widths = fit(self, o, width) if isinstance(o, Table) and not any(
                        c.width is not None for c in o.columns) else None
                except (AttributeError, TypeError):
                    widths = None
                if widths:
                    for n, (col, w) in enumerate(zip(o.columns, widths)):
                        given.append((col, col.width))
                        col.width = w - o._get_padding_width(n)
                    need = max(need, sum(widths) + o._extra_width)
            self.width = need
            try:
                return super().print(*objects, **kw)
            finally:
                self.width = width
                for col, w in given:
                    col.width = w
    return WholeWords


def _WholeWords(**kw):
    return _whole_words()(**kw)


class _Trimmed:
    """A stream whose lines lose their trailing blanks: rich pads every table line to the
    console's width, which a file, a pipe or a diff of two reports should not carry."""

    def __init__(self, stream):
        self._stream, self._line = stream, ""

    def write(self, text: str) -> int:
        *whole, self._line = (self._line + text).split("\n")
        for line in whole:
            self._stream.write(line.rstrip(" ") + "\n")
        return len(text)

    def flush(self) -> None:
        if self._line:  # a line still open (a progress line): as it is
            self._stream.write(self._line)
            self._line = ""
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name):  # encoding, fileno, ...
        return getattr(self._stream, name)


def _closed() -> None:
    """The reader closed our output (`hpadvise check | head -1`): it took what it wanted, so
    exit 0 (as after `grep -q`), with stdout on /dev/null for the interpreter's last flush."""
    import os
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(0)


def pct(text: str, what: str) -> float:
    try:
        v = float(text.rstrip("%"))
    except ValueError:
        raise InputError(f"{what} {text!r} is not a percentage; write it like 1% or 0.5%") \
            from None
    if not math.isfinite(v) or v <= 0 or v >= 100:
        raise InputError(f"{what} {text!r}: give a percentage above 0 and below 100, like 1%")
    return v


# The engines' own options as given on this command line (EngineOption.key -> values), filled
# in while the command line is parsed (app._engine_options).
ENGINE_OPTIONS: dict[str, tuple[str, ...]] = {}


def targets(dsn: list[str] | None = None, engines: list[str] | None = None):
    """What the user pointed hpadvise at: DSNs (each checked: secrets.check_dsn) and every
    engine option given. With `engines` (--db), a DSN no engine among them takes is refused:
    it would be ignored silently."""
    from ..api.model import Targets
    from ..kit.secrets import check_dsn, redact_dsn
    for d in dsn or ():
        if not d.strip():
            raise InputError("--dsn is empty: give a DSN (postgresql://user@host:5432/db, "
                             "mysql://user@host:3306/), or leave the option out")
        check_dsn(d)
        if engines is not None:
            from ..api.engines import registry
            takers = [n for n in registry.names() if registry.get(n).takes_dsn(d)]
            if takers and not set(takers) & set(engines):
                raise InputError(f"--dsn {redact_dsn(d)} is a {'/'.join(takers)} DSN, but --db "
                                 f"{','.join(engines)} leaves {takers[0]} out; add --db "
                                 f"{takers[0]} or drop the DSN")
    return Targets.of(dsn or (), **ENGINE_OPTIONS)


def no_dsn_offline(dsn: list[str] | None, root: str) -> None:
    """--dsn connects to a live server; --root reads a snapshot, which has none to connect
    to: both at once is refused, not one of them dropped silently."""
    from ..facts.sysroot import snapshot_top
    if dsn and snapshot_top(root) != "/":
        raise InputError("--dsn connects to a running server and --root reads a snapshot, "
                         "which holds none: leave out one of them")


def deliver(form: str, data, table, output: str | None = None) -> None:
    """A command's result: `data` as JSON, or what `table()` prints, on stdout or into FILE
    (replaced atomically)."""
    import io
    import json
    from contextlib import redirect_stdout
    if form == "json":
        emit(json.dumps(data, indent=2, default=str) + "\n", output)
        return
    if not output:
        table()
        return
    buf = io.StringIO()
    with redirect_stdout(buf):
        table()
    emit(buf.getvalue(), output)



def complete_engines(incomplete: str) -> list[str]:
    """Shell completion of --db: the installed engines' names (built-in and third-party)."""
    from ..api.engines import registry
    return [n for n in registry.names() if n.startswith(incomplete)]
