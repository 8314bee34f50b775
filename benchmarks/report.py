"""validate's reports: a terminal table, and a self-contained HTML page with SVG plots
(TPS per variant with its 95% CI, TPS over time per run, latency percentiles)."""

from __future__ import annotations

import html
import math

from .wording import (advice, answer, block_ratios, buffers_source, buffers_word, clients_words,
                      defaults_line, design_line, design_of, dtlb_line, effect_words, knob_lines,
                      origin_lines, phase_lines, runs_words, scale_words, server_line,
                      measured_line, steal_line, units)

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"]


def render_terminal(result: dict, console) -> None:
    from rich import box
    from rich.table import Table
    # the answer first: the plan's comparison, then the THP findings beside check's advice
    for i, line in enumerate(answer(result)):
        console.print(f"[bold]{line}[/bold]" if i == 0 else line)
    for line in advice(result):
        console.print(line)
    t = Table(title="Variants", title_justify="left", title_style="bold", box=box.SIMPLE_HEAD)
    for c in ("variant", "runs", "TPS ± 95% CI", "p50 ms", "p95 ms", "p99 ms",
              "page tables", "THP shmem/anon", "on"):
        t.add_column(c, no_wrap=c in ("variant", "TPS ± 95% CI"))
    for v, s in result["variants"].items():
        if not s.get("runs"):
            t.add_row(v, "0", *["-"] * 7)
            continue
        ci = "" if math.isnan(s["tps_ci95"]) else f" ± {s['tps_ci95']:,.0f}"
        t.add_row(v, str(s["runs"]), f"{s['tps_mean']:,.0f}{ci}", _f(s["p50_ms"]),
                  _f(s["p95_ms"]), _f(s["p99_ms"]), _mb(s["page_tables_kb"]),
                  f"{_mb(s['shmem_huge_kb'])} / {_mb(s['anon_huge_kb'])}", s["backing"] or "?")
    console.print(t)
    t = Table(title="Effects (B over A, paired per epoch)", title_justify="left",
              title_style="bold", box=box.SIMPLE_HEAD)
    for c in ("A", "B", "measured", "units", "effect", "95% CI", "verdict"):
        t.add_column(c)
    style = {"improved": "green", "regressed": "red", "no meaningful change": "cyan",
             "inconclusive": "yellow"}
    for e in result["effects"]:
        pct, ci = effect_words(e)
        t.add_row(e["a"], e["b"], design_of(e, result["meta"]), units(e),
                  pct, ci, f"[{style[e['verdict']]}]{e['verdict']}[/]")
    console.print(t)
    m = result["meta"]
    if m.get("workload_about"):
        console.print(f"[dim]workload: {m['workload_about']}[/dim]")
    console.print(f"[dim]{m.get('workload')} workload, {scale_words(m)}, {clients_words(m)}, "
                  f"{runs_words(m, 'runs')}, {buffers_word(m)} {m.get('shared_buffers')}"
                  f"{buffers_source(m)}; stopped: "
                  f"{'interrupted' if m.get('interrupted') else m.get('stopped', 'not recorded')}[/dim]")
    for line in (*origin_lines(m), server_line(m), defaults_line(m), design_line(m),
                 *phase_lines(result),
                 measured_line(m), steal_line(result), dtlb_line(result),
                 *knob_lines(result)):
        if line:
            console.print(f"[dim]{line}[/dim]")


class LiveStatus:
    """One live line while validate runs: variant, block, phase, live TPS, elapsed and the
    budget left. Written to a pipe or a log (no terminal), it prints plain lines instead: each
    setup step and each finished run."""

    def __init__(self, console):
        self.console = console
        self.live = None
        self.said = ""

    def update(self, state) -> None:
        if not self.console.is_terminal:
            self._plain(state)
            return
        from rich.live import Live
        if self.live is None:
            self.live = Live(console=self.console, refresh_per_second=4, transient=True)
            self.live.start()
        left = max(0, state.budget_s - state.elapsed)
        tps = f"{state.live_tps:,.0f} TPS" if state.live_tps else ""
        self.live.update(f"[bold]{state.variant or '-'}[/] block {state.block}  {state.phase}"
                         f"  {tps}  elapsed {state.elapsed:,.0f}s, budget left {left:,.0f}s")

    def _plain(self, state) -> None:
        what = state.last_run or ("" if state.variant else state.phase)
        if not what or what == self.said:
            return
        self.said = what
        if not state.last_run:  # setup: the budget starts with the first run
            self.console.print(f"{what} ...", highlight=False)
            return
        left = max(0, state.budget_s - state.elapsed)
        self.console.print(f"{what}  (elapsed {state.elapsed:,.0f}s, budget left {left:,.0f}s)",
                           highlight=False)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def _f(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"


def _mb(kb) -> str:
    return "-" if kb is None else f"{kb / 1024:,.1f} MiB"


def _svg_bars(title: str, groups: list[tuple[str, float, float | None]], unit: str) -> str:
    w, h, pad = 560, 260, 50
    top = max((v + (e or 0)) for _, v, e in groups) if groups else 1
    top = top * 1.1 or 1
    bw = (w - 2 * pad) / max(1, len(groups))
    out = [f'<svg width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">',
           f'<text x="{w / 2}" y="16" text-anchor="middle" font-weight="bold">{html.escape(title)}</text>']
    for i, (label, v, err) in enumerate(groups):
        x = pad + i * bw + bw * 0.15
        bh = (h - 2 * pad) * v / top
        y = h - pad - bh
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bw * 0.7:.1f}" height="{bh:.1f}" '
                   f'fill="{COLORS[i % len(COLORS)]}" opacity="0.8"/>')
        if err and math.isfinite(err):
            cx = x + bw * 0.35
            y1 = h - pad - (h - 2 * pad) * (v + err) / top
            y2 = h - pad - (h - 2 * pad) * max(0, v - err) / top
            out.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y1:.1f}" y2="{y2:.1f}" '
                       'stroke="black" stroke-width="2"/>')
            for yy in (y1, y2):
                out.append(f'<line x1="{cx - 6:.1f}" x2="{cx + 6:.1f}" y1="{yy:.1f}" '
                           f'y2="{yy:.1f}" stroke="black" stroke-width="2"/>')
        out.append(f'<text x="{x + bw * 0.35:.1f}" y="{h - pad + 16}" text-anchor="middle" '
                   f'font-size="12">{html.escape(label)}</text>')
        ytext = h - pad - (h - 2 * pad) * (v + (err if err and math.isfinite(err) else 0)) / top
        label = f"{v:,.0f}" if v >= 100 else f"{v:.2f}"
        out.append(f'<text x="{x + bw * 0.35:.1f}" y="{ytext - 6:.1f}" text-anchor="middle" '
                   f'font-size="11">{label}{unit}</text>')
    out.append(f'<line x1="{pad}" x2="{w - pad}" y1="{h - pad}" y2="{h - pad}" stroke="#444"/>')
    out.append("</svg>")
    return "".join(out)


def _svg_lines(title: str, series: list[tuple[str, int, list[tuple[float, float]]]],
               warm_s: float = 0) -> str:
    w, h, pad = 760, 300, 60
    xs = [x for _, _, pts in series for x, _ in pts] or [1]
    ys = [y for _, _, pts in series for _, y in pts] or [1]
    xmax, ymax = max(xs) or 1, (max(ys) or 1) * 1.1
    out = [f'<svg width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">']
    if 0 < warm_s < xmax:  # the warm-up is plotted but not measured: shade it
        ww = (w - 2 * pad) * warm_s / xmax
        out.append(f'<rect x="{pad}" y="{pad}" width="{ww:.1f}" height="{h - 2 * pad}" '
                   f'fill="#eee"/><text x="{pad + ww / 2:.1f}" y="{pad + 12}" font-size="10" '
                   'text-anchor="middle">warm-up</text>')
    out += [
           f'<text x="{w / 2}" y="16" text-anchor="middle" font-weight="bold">{html.escape(title)}</text>',
           f'<text x="{pad}" y="{h - 10}" font-size="11">seconds</text>',
           f'<text x="6" y="{pad - 8}" font-size="11">TPS (max {ymax / 1.1:,.0f})</text>']
    for frac in (0.25, 0.5, 0.75, 1.0):  # y grid with TPS values, x ticks in seconds
        yy = h - pad - (h - 2 * pad) * frac / 1.1
        out.append(f'<line x1="{pad}" x2="{w - pad}" y1="{yy:.1f}" y2="{yy:.1f}" '
                   f'stroke="#ddd"/><text x="{pad - 4}" y="{yy + 4:.1f}" font-size="10" '
                   f'text-anchor="end">{ymax / 1.1 * frac:,.0f}</text>')
        xx = pad + (w - 2 * pad) * frac
        out.append(f'<text x="{xx:.1f}" y="{h - pad + 14}" font-size="10" '
                   f'text-anchor="middle">{xmax * frac:.0f}</text>')
    for label, ci, pts in series:
        if not pts:
            continue
        path = " ".join(f"{pad + (w - 2 * pad) * x / xmax:.1f},{h - pad - (h - 2 * pad) * y / ymax:.1f}"
                        for x, y in pts)
        out.append(f'<polyline fill="none" stroke="{COLORS[ci % len(COLORS)]}" stroke-width="1.5" '
                   f'opacity="0.7" points="{path}"><title>{html.escape(label)}</title></polyline>')
    out.append(f'<line x1="{pad}" x2="{w - pad}" y1="{h - pad}" y2="{h - pad}" stroke="#444"/>')
    out.append("</svg>")
    return "".join(out)


def render_html(result: dict) -> str:
    variants = list(result["variants"])
    color = {v: i for i, v in enumerate(variants)}
    tps = [(v, s.get("tps_mean", 0.0), s.get("tps_ci95")) for v, s in result["variants"].items()
           if s.get("runs")]
    series = [(f"{s['variant']} block {s['block'] + 1}", color[s["variant"]],
               [(p[0], p[1]) for p in s["progress"]]) for s in result["samples"]]
    lat = "".join(_svg_bars(f"latency p{p} (ms)", [(v, s.get(f"p{p}_ms") or 0.0, None)
                                                     for v, s in result["variants"].items()
                                                     if s.get("runs")], "")
                  for p in (50, 95, 99))
    pt = _svg_bars("the server's page tables during the run (MiB)",
                   [(v, (s.get("page_tables_kb") or 0) / 1024, None)
                    for v, s in result["variants"].items() if s.get("runs")], "")
    rows = "".join(
        f"<tr><td>{html.escape(e['a'])}</td><td>{html.escape(e['b'])}</td>"
        f"<td>{html.escape(design_of(e, result['meta']))}</td><td>{units(e)}</td>"
        f"<td>{html.escape(effect_words(e)[0])}</td><td>{html.escape(effect_words(e)[1])}</td>"
        f"<td><b>{html.escape(e['verdict'])}</b></td></tr>" for e in result["effects"])
    legend = " ".join(f'<span style="color:{COLORS[color[v] % len(COLORS)]}">&#9632; '
                      f'{html.escape(v)}</span>' for v in variants)
    ratios = "".join(
        f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td><td>"
        + ", ".join(f"{r:.3f}" for _, r in rs) + "</td></tr>" for a, b, rs in block_ratios(result))
    m = result["meta"]
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>hpadvise validate</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px}}</style></head><body>
<h1>hpadvise validate</h1>
<h2>Should I apply the plan?</h2>
{"".join(f"<p>{html.escape(a)}</p>" for a in answer(result) + advice(result))}
<h2>Verdict</h2><table><tr><th>A</th><th>B</th><th>measured</th><th>units</th>
<th>effect of B</th><th>95% CI</th><th>verdict</th></tr>{rows}</table>
<details><summary>How it was measured: the workload, the servers and their settings</summary>
<p>{html.escape(str(m.get('workload')))} workload, {scale_words(m)},
{clients_words(m)}, {runs_words(m)}, {buffers_word(m)}
{html.escape(str(m.get('shared_buffers')) + buffers_source(m))}, {_server(m)}.
{html.escape(defaults_line(m))}
Stopped: {'interrupted' if m.get('interrupted') else html.escape(str(m.get('stopped', 'not recorded')))}.
{html.escape(measured_line(m))} {steal_line(result)} {html.escape(dtlb_line(result))}</p>
{"".join(f"<p>{html.escape(a)}</p>" for a in origin_lines(m))}
<p>{html.escape(design_line(m))}</p>
{"".join(f"<p>{html.escape(a)}</p>" for a in phase_lines(result))}
<p>{html.escape(str(m.get('workload_about') or ''))}</p>
</details>
<h2>What each variant changed</h2><ul>{"".join(f"<li>{html.escape(k)}</li>" for k in knob_lines(result))}</ul>
<h2>Per-epoch ratios (B / A)</h2><table><tr><th>A</th><th>B</th><th>per epoch</th></tr>{ratios}</table>
<p>Effect: mean over epochs (starts of every variant's server) of ln(TPS_B / TPS_A), each
epoch's TPS the geometric mean of its runs, as a percentage, with a Student t 95% confidence
interval; noise band ±{m.get('band_pct')}%.</p>
<h2>Throughput</h2>{_svg_bars("mean TPS with 95% CI", tps, "")}
<h2>TPS over time, every run</h2><p>{legend}</p>{_svg_lines("TPS per second", series, m.get("warm_s") or 0)}
<h2>Latency</h2>{lat}
<h2>Memory</h2>{pt}
</body></html>
"""


def _server(m: dict) -> str:
    return html.escape(server_line(m).removeprefix("server: "))
