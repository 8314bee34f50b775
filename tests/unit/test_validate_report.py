"""validate's HTML page and terminal table as people read them: the answer first, the
measurement's details folded below it, and an effect without an interval (one THP cycle)
said in words, never as infinities or NaN. Rendered from a recorded real run
(lab/results/bighost-24GB-default-10m.json: 3 epochs of the plan's comparison, 1 THP cycle)."""

import io
import json
import math
import re
from pathlib import Path

from rich.console import Console

from hpadvise.benchmarks.report import render_html, render_terminal
from hpadvise.benchmarks.wording import effect_words

RUN = Path(__file__).resolve().parents[2] / "lab" / "results" / "bighost-24GB-default-10m.json"
NOT_A_NUMBER = re.compile(r"\b(-?inf|nan|infinity)\b", re.I)


def run() -> dict:
    d = json.loads(RUN.read_text())
    one = [e for e in d["effects"] if e["n"] < 2]
    assert one and math.isinf(one[0]["lo_pct"])  # what the page must put in words
    return d


def test_the_html_answers_first_and_has_no_infinities():
    page = render_html(run())
    assert not NOT_A_NUMBER.findall(re.sub(r"<[^>]+>", " ", page))
    answer, verdict, details = (page.index(x) for x in (
        "Should I apply the plan?", "<h2>Verdict</h2>", "<details>"))
    assert answer < verdict < details < page.index("s measured per run after")
    assert "none: 1 cycle measured, at least two are needed" in page and "1 cycles" not in page
    assert "+6.89% .. +8.89%" in page  # a real interval stays a number


def test_the_terminal_table_says_it_in_words_too():
    out = io.StringIO()
    render_terminal(run(), Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert not NOT_A_NUMBER.findall(text)
    assert "none: 1 cycle measured" in text


def test_effect_words():
    assert effect_words({"pct": 2.5, "lo_pct": 1.0, "hi_pct": 4.0, "n": 5}) == (
        "+2.50%", "+1.00% .. +4.00%")
    assert effect_words({"pct": None, "lo_pct": None, "hi_pct": None, "n": 0,
                         "unit": "epoch"}) == ("none", "none: 0 epochs measured, at least two "
                                                       "are needed")
