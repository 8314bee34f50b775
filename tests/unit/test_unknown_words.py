"""No output carries an unknown as if it were a value: every captured host state rendered by
`check` in each format (table, JSON, Prometheus) and by `k8s`, and every recorded validate
run rendered as its terminal table and its HTML page, is searched for "None", a "?" inside a
path or a command, and infinities or NaN. A JSON value the schema requires as a string or a
number is never null."""

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from fixtures.trees import states
from hpadvise.benchmarks.report import render_html, render_terminal
from support import run_cli

# the validate results among the lab's records (the others are other commands' outputs)
RESULTS = [p for p in sorted((Path(__file__).resolve().parents[2] / "lab" / "results")
                             .glob("*.json"))
           if isinstance(d := json.loads(p.read_text()), dict) and {"effects", "meta"} <= set(d)]
NONE = re.compile(r"\bNone\b")
NOT_A_NUMBER = re.compile(r"(?<![\w-])(-?inf|nan|infinity)(?![\w-])", re.I)
# "?" where a path or a command would be: "/?", "?/", "-D ?", "=?", a quoted "?"
QUESTION_AS_VALUE = re.compile(r"/\?|\?/|-\w \?(\s|$)|=\?(\s|$)|['\"]\?['\"]")


def bad_words(text: str) -> list[str]:
    return [m.group(0) for rx in (NONE, NOT_A_NUMBER, QUESTION_AS_VALUE)
            for m in rx.finditer(text)]


def test_the_sweep_finds_what_it_looks_for():
    assert len(RESULTS) >= 40
    for text in ("restart needed: None takes", "pg_ctl -D ? -m fast", "create /proc/1/root/?",
                 "Measured None, 3 epochs", "CI -inf .. +2%", "ratio nan", "'?'"):
        assert bad_words(text), text
    for text in ("Apply the plan? Yes", "no pool (nothing runs on it?)", "x = information",
                 "infinite-loop", "version  ?  "):
        assert not bad_words(text), text


@pytest.mark.parametrize("state", states())
def test_every_captured_host_in_every_format(hosts, state):
    root = str(hosts / state)
    outs = {}
    for fmt in ("table", "json", "prometheus"):
        r = run_cli("check", "--format", fmt, "--root", root, env={"COLUMNS": "200"})
        assert r.returncode in (0, 1), (fmt, r.stdout[-500:] + r.stderr[-500:])
        outs[fmt] = r.stdout
    r = run_cli("k8s", "--root", root)
    outs["k8s"] = r.stdout + r.stderr
    for fmt, text in outs.items():
        assert not bad_words(text), (state, fmt, bad_words(text))
    d = json.loads(outs["json"])
    for i in d["instances"]:
        for k in ("engine", "id", "label", "running", "settings"):
            assert i[k] is not None, (state, i["id"], k)
        v = i["version"]  # the release, or why it is unknown: never null
        assert isinstance(v, str) and v or isinstance(v, dict) and v["unknown"] and \
            set(v) <= {"unknown", "supply"}, (state, i["id"], v)
        dd = i["settings"].get("data_directory")
        assert dd is None or isinstance(dd, (str, dict)), dd
        if isinstance(dd, str):
            assert dd.startswith("/"), (state, i["id"], dd)


@pytest.mark.parametrize("path", RESULTS, ids=[p.stem for p in RESULTS])
def test_every_recorded_validate_run_as_text_and_html(path):
    d = json.loads(path.read_text())
    page = re.sub(r"<[^>]+>", " ", render_html(d))
    out = io.StringIO()
    render_terminal(d, Console(file=out, width=200, color_system=None))
    for name, text in (("html", page), ("terminal", out.getvalue())):
        assert not bad_words(text), (path.name, name, bad_words(text))
