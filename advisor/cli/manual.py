"""Manual pages made from the CLI's own help: hpadvise(1) and hpadvise-COMMAND(1) for each
command, with its synopsis, description, options (the engines' own included), exit codes and
examples, as the commands' --help says them. `scripts/gen_man.py` writes them into man/man1
(shipped in the wheel's data files); `hpadvise man COMMAND` prints one where `man` is
missing. Roff as man(7) describes it: a leading period or quote escaped with \\&, every
backslash as \\e, a hyphen in an option as \\-."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Optional

import typer

from .app import app
from .exits import EXITS, exit_codes

SECTION = "1"
# the completion scripts shipped beside the pages: file name -> typer's shell
COMPLETIONS = {"hpadvise": "bash", "_hpadvise": "zsh", "hpadvise.fish": "fish"}


def _source() -> str:
    """The pages' source line: the version, so that the files change with releases only."""
    from ..facts.dists import version
    return f"hpadvise {version('hpadvise') or ''}".strip()


def completion(shell: str) -> str:
    """typer's completion script for `shell`: it asks hpadvise itself for the words."""
    from typer._completion_shared import get_completion_script
    return get_completion_script(prog_name="hpadvise", complete_var="_HPADVISE_COMPLETE",
                                 shell=shell)


@dataclass
class Page:
    name: str  # "hpadvise" or "hpadvise-apply"
    summary: str
    synopsis: str
    description: list[str]  # paragraphs
    options: list[tuple[str, str]]
    exit_codes: str | None
    examples: list[str]
    commands: tuple[tuple[str, str], ...] = ()  # hpadvise(1)'s: each command and its line
    environment: tuple[tuple[str, str], ...] = ()  # hpadvise(1)'s: each variable it reads


# The environment variables hpadvise reads itself, for hpadvise(1)'s ENVIRONMENT section.
ENVIRONMENT = (
    ("HPADVISE_JOURNAL_DIR", "The journal's directory for apply, rollback, history, capture, "
     "validate and probe (default /var/lib/hpadvise/journal); --journal-dir overrides it."),
    ("HPADVISE_DEBUG", "1: a bug in hpadvise (exit 70) shows its traceback instead of one "
     "line."),
    ("HPADVISE_PYZ_CACHE", "hpadvise.pyz only: the directory it unpacks itself into "
     "(default ~/.cache/hpadvise, or $XDG_CACHE_HOME/hpadvise); off: run from the archive "
     "itself."),
)


def _group():
    """The command line's click group, every command registered (the package imports them
    all before this module)."""
    from .app import command_group
    return command_group()


def _split_help(text: str) -> tuple[list[str], str | None, list[str]]:
    """A command's help as paragraphs, its "Exit codes:" paragraph and its examples."""
    paras, exits, examples = [], None, []
    blocks = [b for b in re.split(r"\n\s*\n", (text or "").replace("\b", "")) if b.strip()]
    in_examples = False
    for b in blocks:
        flat = " ".join(b.split())
        if flat.startswith("Examples:") or flat.startswith("Example:"):
            in_examples = True
            rest = flat.split(":", 1)[1].strip()
            if rest:
                examples.append(rest)
            continue
        if in_examples:
            examples += [ln.strip() for ln in b.splitlines() if ln.strip()]
        elif flat.startswith("Exit codes:"):
            exits = flat.split(":", 1)[1].strip()
        else:
            paras.append(flat)
    return paras, exits, examples


def _summary(para: str) -> str:
    """A page's NAME line: its first paragraph up to the first colon or full stop."""
    m = re.search(r"[:.](\s|$)", para)
    return para[:m.start()] if m else para


def pages() -> dict[str, Page]:
    """Every page, by name: hpadvise first, then one per command in the help's order."""
    import click

    from ..api.engines import registry
    group = _group()
    # the app's own context settings (-h beside --help), as the commands' --help has them
    root = click.Context(group, info_name="hpadvise", **(group.context_settings or {}))
    paras, _, _ = _split_help(group.help or "")
    out = {"hpadvise": Page(
        "hpadvise", _summary(paras[0]) if paras else "", "hpadvise [--version] COMMAND [OPTIONS]",
        paras + ["Each command has a page of its own, hpadvise-COMMAND(1), and its --help."],
        [(" ".join(p.opts), p.help or "") for p in group.params if p.help],
        "0 done; 1 the command's own failure (its page says which); 2 bad input, one line on "
        "stderr, nothing half-changed; 70 a bug in hpadvise (HPADVISE_DEBUG=1 shows the "
        "traceback); 130 interrupted.", [],
        tuple((n, _summary(_split_help(c.help or "")[0][0])) for n, c in group.commands.items()),
        ENVIRONMENT)}
    for name, cmd in group.commands.items():
        ctx = click.Context(cmd, info_name=name, parent=root)
        paras, _, examples = _split_help(cmd.help or "")
        exits = EXITS.get(name) and exit_codes(name)
        opts = []
        for p in cmd.get_params(ctx):
            rec = p.get_help_record(ctx)
            if rec is not None:
                opts.append((rec[0], rec[1]))
        for eng, opt in registry.options(name):
            opts.append((f"{opt.flag} {opt.metavar}", f"{opt.help} (engine {eng})"))
        usage = " ".join(cmd.collect_usage_pieces(ctx))
        out[f"hpadvise-{name}"] = Page(
            f"hpadvise-{name}", _summary(paras[0]) if paras else "", f"hpadvise {name} {usage}",
            paras, opts, exits or out["hpadvise"].exit_codes, examples)
    return out


def _roff_text(s: str) -> str:
    s = s.replace("\\", "\\e")
    return "\n".join(("\\&" + ln) if ln[:1] in (".", "'") else ln for ln in s.split("\n"))


def _roff_opt(s: str) -> str:
    return _roff_text(s).replace("-", "\\-")


def roff(p: Page) -> str:
    """The page in man(7) roff."""
    title = p.name.upper()
    out = [f'.TH "{title}" "{SECTION}" "" "{_source()}" "User Commands"',
           ".SH NAME", f"{_roff_opt(p.name)} \\- {_roff_text(p.summary.rstrip('.'))}",
           ".SH SYNOPSIS", ".B " + _roff_opt(p.synopsis)]
    if p.description:
        out.append(".SH DESCRIPTION")
        for i, para in enumerate(p.description):
            if i:
                out.append(".PP")
            out.append(_roff_text(para))
    if p.commands:
        out.append(".SH COMMANDS")
        for name, line in p.commands:
            out += [".TP", f".BR hpadvise\\-{_roff_opt(name)} (1)", _roff_text(line)]
    if p.options:
        out.append(".SH OPTIONS")
        for flags, text in p.options:
            out += [".TP", ".B " + _roff_opt(flags), _roff_text(" ".join(text.split()))]
    if p.environment:
        out.append(".SH ENVIRONMENT")
        for name, line in p.environment:
            out += [".TP", ".B " + _roff_opt(name), _roff_text(line)]
    if p.exit_codes:
        out += [".SH EXIT STATUS", _roff_text(p.exit_codes)]
    if p.examples:
        out += [".SH EXAMPLES", ".nf", ".RS 4"]
        out += [_roff_opt(e) for e in p.examples]
        out += [".RE", ".fi"]
    if p.name != "hpadvise":
        out += [".SH SEE ALSO", ".BR hpadvise (1)"]
    return "\n".join(out) + "\n"


def text(p: Page, width: int = 79) -> str:
    """The page as plain text, for a host without man."""
    from textwrap import fill

    def para(t: str, indent: int = 4) -> str:
        return fill(" ".join(t.split()), width, initial_indent=" " * indent,
                    subsequent_indent=" " * indent)
    lines = ["NAME", para(f"{p.name} - {p.summary}"), "", "SYNOPSIS", para(p.synopsis), ""]
    if p.description:
        lines += ["DESCRIPTION", *(para(d) + "\n" for d in p.description)]
    if p.commands:
        lines.append("COMMANDS")
        for name, line in p.commands:
            lines += [f"    {name}", para(line, 8)]
        lines.append("")
    if p.options:
        lines.append("OPTIONS")
        for flags, t in p.options:
            lines += [f"    {flags}", para(t, 8)]
        lines.append("")
    if p.environment:
        lines.append("ENVIRONMENT")
        for name, t in p.environment:
            lines += [f"    {name}", para(t, 8)]
        lines.append("")
    if p.exit_codes:
        lines += ["EXIT STATUS", para(p.exit_codes), ""]
    if p.examples:
        lines += ["EXAMPLES", *(f"    {e}" for e in p.examples), ""]
    return "\n".join(lines)


@app.command("man")
def man_cmd(
    command: Annotated[Optional[str], typer.Argument(
        metavar="COMMAND", help="The command whose page to print; none: hpadvise(1).")] = None,
    roff_out: Annotated[bool, typer.Option(
        "--roff", help="Print the page's roff source (what man/man1 ships).")] = False,
):
    """Print a manual page: hpadvise(1), or hpadvise-COMMAND(1), as plain text (for a host
    without man) or as its roff source.

    Examples:

    \b
      hpadvise man apply
      hpadvise man validate --roff | man -l -
    """
    from ..kit.errors import InputError
    all_pages = pages()
    name = "hpadvise" if command in (None, "hpadvise") else f"hpadvise-{command}"
    if name not in all_pages:
        known = ", ".join(n.removeprefix("hpadvise-") for n in all_pages if n != "hpadvise")
        raise InputError(f"no command {command!r}: give one of {known}")
    page = all_pages[name]
    print(roff(page) if roff_out else text(page), end="")
