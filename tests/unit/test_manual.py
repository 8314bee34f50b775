"""The manual pages and shell completions, made from the CLI's own help: what the repository
ships is what the CLI says (scripts/gen_manual.py writes them), every page passes groff's
warnings, `hpadvise man` prints one on a host without man, and the completion asks hpadvise
itself."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
from gen_manual import expected  # noqa: E402


def hp(*args, env=None):
    return subprocess.run([sys.executable, "-m", "hpadvise.cli", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_shipped_files_are_what_the_cli_says():
    want = expected()
    assert len([p for p in want if p.suffix == ".1"]) > 14
    stale = [str(p.relative_to(REPO)) for p, text in want.items()
             if not p.exists() or p.read_text() != text]
    assert stale == [], "run scripts/gen_manual.py"
    shipped = {p for d in ("man/man1", "completions") for p in (REPO / d).iterdir()}
    assert shipped == set(want), "a page of a command that is gone"


def test_every_page_passes_groffs_warnings():
    if not shutil.which("groff"):
        pytest.fail("groff not found: run scripts/test.sh, which installs groff-base")
    for page in sorted((REPO / "man" / "man1").glob("*.1")):
        r = subprocess.run(["groff", "-Tutf8", "-man", "-ww", "-z", str(page)],
                           capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr, (page.name, r.stderr)


def test_each_page_has_what_its_help_has():
    apply_page = (REPO / "man" / "man1" / "hpadvise-apply.1").read_text()
    for part in (".SH SYNOPSIS", ".SH OPTIONS", ".SH EXIT STATUS", ".SH EXAMPLES",
                 "\\-\\-dry\\-run", "hpadvise rollback"):
        assert part in apply_page, part
    check_page = (REPO / "man" / "man1" / "hpadvise-check.1").read_text()
    assert "\\-\\-pgdata" in check_page  # an engine's own option is on the page too


def test_hpadvise_man_prints_a_page_without_man():
    r = hp("man", "size")
    assert r.returncode == 0, r.stderr
    for head in ("NAME", "SYNOPSIS", "OPTIONS", "EXIT STATUS", "EXAMPLES"):
        assert f"\n{head}\n" in f"\n{r.stdout}", head
    assert "1 a pool\n    does not fit" in r.stdout or "1 a pool does not fit" in r.stdout
    r = hp("man", "nope")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "give one of" in r.stderr and not r.stdout


def test_the_completion_asks_hpadvise():
    bash = (REPO / "completions" / "hpadvise").read_text()
    r = subprocess.run(["bash", "-n"], input=bash, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = hp(env={"_HPADVISE_COMPLETE": "complete_bash", "COMP_WORDS": "hpadvise val",
                "COMP_CWORD": "1"})
    assert r.stdout.split() == ["validate"], r.stdout + r.stderr
    r = hp(env={"_HPADVISE_COMPLETE": "complete_bash", "COMP_WORDS": "hpadvise apply --dry",
                "COMP_CWORD": "2"})
    assert r.stdout.split() == ["--dry-run"], r.stdout + r.stderr


def test_the_main_page_names_every_variable_hpadvise_reads():
    """hpadvise(1)'s ENVIRONMENT names each HPADVISE_ variable the product's code reads,
    leaving out only the tests' kill points and the shell completion's own variable."""
    import re
    read = set()
    for d in ("advisor", "plugins", "benchmarks", "scripts/pyz"):
        for f in (REPO / d).rglob("*.py"):
            read |= set(re.findall(r"HPADVISE_[A-Z_]+", f.read_text()))
    read -= {"HPADVISE_COMPLETE", "HPADVISE_EOF"}  # click's completion; a heredoc's marker
    read = {v for v in read if not v.startswith("HPADVISE_TEST_")}
    page = hp("man").stdout
    env = page.split("ENVIRONMENT", 1)[1].split("EXIT STATUS", 1)[0]
    assert read and {v for v in read if v not in env} == set(), env
