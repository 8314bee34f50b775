"""Every example the manual gives, as a reader would paste it: the command lines in README.md
and docs/*.md (code blocks, and inline commands without placeholders) and in each command's
--help (the Examples the manual pages carry).

- Each parses: the command, its options and their values exist as written (click's own parser,
  with the engines' options added as for a real run).
- Each that changes nothing on the host runs here, on this host's live servers: check, size,
  report, k8s, engines, profiles, history, man, snapshot (into a directory of the test), and
  apply/rollback with --dry-run or --print-script. Paths an example takes for granted (a
  report directory, a snapshot, a data directory before its first start, an output file)
  are made in a temporary directory and put in their place. They end with 0, or 1 where the
  command's page says 1 is its answer (a "does not fit", a --fail-on finding, nothing to roll
  back); never 2 (bad input) or 70 (a bug).
- The others (validate, capture, probe, apply and rollback that change things, thp-exec) are
  left to their own tests: they only parse here."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click
import pytest

from hpadvise.cli.app import _engine_options, command_group
from hpadvise.cli.manual import pages
from hpadvise.kit.errors import InputError
from support import REPO

pytestmark = pytest.mark.integration

# Lines of a synopsis, not examples: options in brackets, alternatives, placeholders in capitals
SYNOPSIS = re.compile(r"\[|\]|\.\.\.|\b[A-Z][A-Z_]{1,}\b|\|[a-z]")
READ_ONLY = {"check", "size", "report", "k8s", "engines", "profiles", "history", "man",
             "snapshot", "--version"}


def _commands(line: str) -> list[str]:
    """The hpadvise command lines in one shell line: before a comment, a pipe or a redirect;
    `sudo` and `sudo -u USER` dropped; the archive's `python3 hpadvise.pyz` read as
    `hpadvise`. Commands joined by && stay one example ("A && B"), run in turn."""
    line = re.sub(r"\s+#.*$", "", line.strip().removeprefix("$ "))
    out = []
    for part in line.split("&&"):
        part = re.split(r"\s\|\s|\s>\s?", part)[0].strip()
        part = re.sub(r"^sudo( -u \S+)? ", "", part)
        part = re.sub(r"^(ssh \S+ )?(sudo )?python3 (\S*/)?hpadvise\.pyz", "hpadvise", part)
        if part.startswith("hpadvise "):
            out.append(part)
    return [" && ".join(out)] if out else []


def _parts(example: str) -> list[list[str]]:
    """An example's commands, each as hpadvise's arguments."""
    return [shlex.split(c)[1:] for c in example.split(" && ")]


def examples() -> list[tuple[str, str]]:
    """(where, command line) of every example, once each."""
    found: dict[str, str] = {}
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text, where = path.read_text(), str(path.relative_to(REPO))
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
            for line in block.splitlines():
                for cmd in _commands(line):
                    found.setdefault(cmd, where)
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for span in re.findall(r"`((?:sudo )?hpadvise [^`\n]+)`", prose):
            for cmd in _commands(span):
                if len(_parts(cmd)[0]) > 1:  # `hpadvise capture` names a command
                    found.setdefault(cmd, where)
    for name, page in pages().items():
        for line in page.examples:
            for cmd in _commands(line):
                found.setdefault(cmd, f"{name}(1)")
    return sorted(((w, c) for c, w in found.items() if not SYNOPSIS.search(c)),
                  key=lambda x: x[1])


EXAMPLES = examples()


def test_the_examples_were_found():
    subs = {argv[0] for _, c in EXAMPLES for argv in _parts(c)}
    assert len(EXAMPLES) >= 40 and subs >= {"check", "apply", "validate", "capture", "size",
                                            "report", "k8s", "probe", "rollback", "man"}, subs


@pytest.mark.parametrize("where,line", EXAMPLES, ids=[c for _, c in EXAMPLES])
def test_every_example_parses(where, line):
    for argv in _parts(line):
        _parses(where, line, argv)


def _parses(where: str, line: str, argv: list[str]) -> None:
    group = command_group()
    _engine_options(group, argv)
    if argv[0].startswith("-"):
        return  # --version: the group's own option, run below
    cmd = group.commands.get(argv[0])
    assert cmd is not None, f"{where}: no command {argv[0]!r}: {line}"
    root = click.Context(group, info_name="hpadvise")
    try:
        cmd.make_context(argv[0], argv[1:], parent=root, resilient_parsing=False)
    except click.exceptions.Exit:
        pass
    except InputError:
        pass  # an option's check of this host (an --output directory that is not here)
    except click.UsageError as exc:
        pytest.fail(f"{where}: {line}: {exc.format_message()}")


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """The files and directories the examples take for granted, made here: a check report in
    a reports directory, a snapshot of this host, a PostgreSQL data directory before its
    first start (initdb of the host's PostgreSQL), and room for outputs."""
    base = tmp_path_factory.mktemp("examples")
    reports = base / "reports"
    reports.mkdir()
    r = _run(["check", "--json", "--output", str(reports / "db7.json")], base)
    assert r.returncode in (0, 1), r.stderr
    snap = base / "audit-db7"
    r = _run(["snapshot", str(snap)], base)
    assert r.returncode == 0, r.stderr
    initdb = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not initdb:
        pytest.fail("no initdb under /usr/lib/postgresql: run scripts/test.sh, which installs "
                    "PostgreSQL")
    # (where the server's OS user can reach it: pytest's own directories are private)
    pgdata = Path(tempfile.mkdtemp(prefix="hpadvise-examples-")) / "pgdata"
    pgdata.parent.chmod(0o755)
    pgdata.mkdir()
    os.chown(pgdata, *_ids("postgres"))
    r = subprocess.run(["runuser", "-u", "postgres", "--", str(initdb[-1]), "-D", str(pgdata),
                        "--no-sync", "-A", "trust"], capture_output=True, text=True,
                       timeout=120, cwd="/")
    assert r.returncode == 0, r.stderr
    yield {
        "/srv/pg/16/main": str(pgdata), "/var/lib/postgresql/data": str(pgdata),
        "/srv/audit/db7": str(snap), "/srv/audit/": str(reports), "./reports": str(reports),
        "reports/*.json": str(reports / "db7.json"),
        "/tmp/host-a": str(base / "host-a"),
        # a server of this host (trust on 127.0.0.1) for the DSN of a remote one
        "postgresql://app@db1:5432/postgres": "postgresql://postgres@127.0.0.1:5432/postgres",
        "/var/lib/prometheus/node-exporter/hpadvise.prom": str(base / "hpadvise.prom"),
        "@cwd": str(base),
    }
    shutil.rmtree(pgdata.parent)


def _ids(user: str) -> tuple[int, int]:
    import pwd
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


def _run(argv: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpadvise.cli", *argv], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env={**os.environ, "COLUMNS": "120"})


def _read_only(argv: list[str]) -> bool:
    if argv[0] in READ_ONLY:
        return True
    return argv[0] in ("apply", "rollback") and bool({"--dry-run", "--print-script"} & set(argv))


RUNS = [(w, c) for w, c in EXAMPLES if all(_read_only(a) for a in _parts(c))]
# Examples whose answer on a host with nothing of theirs is bad input, as their page says
# (exit code, the words): a rollback with no apply in the journal (the tests' own, empty)
ANSWERS = {"hpadvise rollback --dry-run": (2, "nothing to roll back")}


@pytest.mark.parametrize("where,line", RUNS, ids=[c for _, c in RUNS])
def test_every_read_only_example_runs_here(where, line, places):
    for argv in _parts(line):
        argv = [places.get(a, a) for a in argv]
        r = _run(argv, places["@cwd"])
        want = ANSWERS.get(line)
        if want:
            assert r.returncode == want[0] and want[1] in r.stderr, (r.returncode, r.stderr)
            continue
        assert r.returncode in (0, 1), f"{where}: {line}: exit {r.returncode}: " \
                                       f"{r.stderr[-1500:]}"
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr, \
            r.stderr[-1500:]
        if r.returncode == 1:  # the command's own answer, said in words
            assert (r.stdout + r.stderr).strip(), f"{where}: {line}: exit 1 without a word"
        if "--json" in argv and "--output" not in argv:
            json.loads(r.stdout)
