"""validate's and report's HTML pages as a person sees them: rendered by headless Chromium in
a 1280 x 800 window. The answer is in the first screen, every chart is drawn, nothing is
wider than the window, and no "inf" or "nan" is shown. validate's pages come from recorded
real runs in lab/results (render_html, as `validate --html` writes them), report's from
`hpadvise report --html` over the captured hosts.

A probe script, added at the end of a copy of each page, measures the laid-out page after
it has loaded and writes what it found into the DOM, which Chromium prints (--dump-dom)."""

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from hpadvise.benchmarks.report import render_html

from support import run_cli

LAB = Path(__file__).resolve().parents[2] / "lab" / "results"
WIDTH, HEIGHT = 1280, 800
NOT_A_NUMBER = re.compile(r"\b(-?inf|nan|infinity)\b", re.I)

# Runs of different shapes: one THP cycle (an effect without an interval), a run stopped
# early, a simultaneous design, a replayed workload, a sequential A/A run on 2 MiB pages.
RUNS = ["bighost-24GB-default-10m", "aa-4k-stopped", "aa-simultaneous", "replay-own",
        "aa-huge-10m"]

PROBE = """<script>
window.addEventListener("load", () => {
  const box = (el) => el ? el.getBoundingClientRect() : null;
  const heads = [...document.querySelectorAll("h2")];
  const ask = heads.find((h) => h.textContent.startsWith("Should I apply"));
  let answer = null;  // the last paragraph of the answer, or the fleet's first host row
  if (ask) {
    for (let el = ask.nextElementSibling; el && el.tagName === "P"; el = el.nextElementSibling)
      answer = el;
  } else {
    answer = document.querySelector("table tr:nth-child(2)");
  }
  const svgs = [...document.querySelectorAll("svg")].map((s) => {
    const marks = [...s.querySelectorAll("rect, polyline, path, line, circle")];
    return {width: box(s).width, height: box(s).height, marks: marks.length,
            drawn: marks.filter((m) => { const b = m.getBBox(); return b.width > 0 || b.height > 0; }).length,
            right: box(s).right};
  });
  const probe = document.createElement("pre");
  probe.id = "hpadvise-probe";
  probe.textContent = JSON.stringify({
    innerWidth: window.innerWidth, innerHeight: window.innerHeight,
    scrollWidth: document.documentElement.scrollWidth,
    answerBottom: answer ? box(answer).bottom : null,
    answerText: answer ? answer.innerText : null,
    svgs: svgs, text: document.body.innerText});
  document.body.appendChild(probe);
});
</script>"""


@pytest.fixture(scope="module")
def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Chromium not installed (Debian: apt-get install chromium)")
    return exe


def _chromium(exe: str, profile: Path, *args: str) -> str:
    r = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--no-first-run", f"--user-data-dir={profile}",
                        f"--window-size={WIDTH},{HEIGHT}", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _png(path: Path) -> tuple[int, int, set]:
    """Width, height and the distinct byte values of a PNG's pixel rows."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    return size[0], size[1], set(zlib.decompress(idat))


def seen(exe: str, page: str, tmp: Path) -> dict:
    """What Chromium laid out for `page`: the probe's measurements, and its screenshot."""
    src, probed = tmp / "page.html", tmp / "probed.html"
    src.write_text(page)
    probed.write_text(page.replace("</body>", PROBE + "</body>") if "</body>" in page
                      else page + PROBE)
    dom = _chromium(exe, tmp / "profile", "--virtual-time-budget=3000", "--dump-dom",
                    probed.as_uri())
    found = re.search(r'<pre id="hpadvise-probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    got = json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<")
                     .replace("&gt;", ">").replace("&quot;", '"'))
    shot = tmp / "screen.png"
    _chromium(exe, tmp / "profile", f"--screenshot={shot}", src.as_uri())
    got["screenshot"] = _png(shot)
    return got


def looks_right(got: dict) -> None:
    # --dump-dom lays the page out 1280 px wide and shorter than the screenshot's 800 px (657
    # here): the answer must fit the shorter screen
    assert got["innerWidth"] == WIDTH and got["innerHeight"] <= HEIGHT
    assert got["scrollWidth"] <= got["innerWidth"], "wider than the window"
    assert got["answerText"], "no answer found"
    assert got["answerBottom"] <= got["innerHeight"], "the answer is below the first screen"
    for svg in got["svgs"]:
        assert svg["width"] > 0 and svg["height"] > 0 and svg["drawn"] > 0, svg
        assert svg["right"] <= got["innerWidth"], svg
    assert not NOT_A_NUMBER.findall(got["text"]), NOT_A_NUMBER.findall(got["text"])
    w, h, values = got["screenshot"]
    assert (w, h) == (WIDTH, HEIGHT)
    assert len(values) > 16, "the screenshot is blank"


@pytest.mark.parametrize("name", RUNS)
def test_validate_page_in_a_browser(chromium, tmp_path, name):
    result = json.loads((LAB / f"{name}.json").read_text())
    got = seen(chromium, render_html(result), tmp_path)
    looks_right(got)
    ask = got["text"].index("Should I apply the plan?")
    assert got["text"].index("Apply the plan?", ask) < got["text"].index("Verdict")
    runs = [v for v in result["variants"].values() if v.get("runs")]
    if any(s["progress"] for s in result["samples"]):  # TPS over time, then the bars
        assert len(got["svgs"]) >= 1 + 3 * bool(runs)
    # the settings of the scratch servers are folded below the answer
    assert got["text"].index("How it was measured") > got["text"].index("Verdict")


def test_report_page_in_a_browser(chromium, hosts, tmp_path):
    page = tmp_path / "fleet.html"
    trees = sorted(p for p in (hosts).iterdir() if p.is_dir())
    r = run_cli("report", *map(str, trees), "--html", str(page))
    assert r.returncode == 0, r.stderr
    got = seen(chromium, page.read_text(), tmp_path)
    looks_right(got)
    assert got["text"].count("\n") >= len(trees)  # a row per host
