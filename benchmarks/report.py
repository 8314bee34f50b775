"""validate's reports: a terminal table, and a self-contained HTML page with SVG plots
(TPS per variant with its 95% CI, TPS over time per run, latency percentiles)."""

from __future__ import annotations

import html
import math

from .drivers import BENCHMARKS
from .variants import kind

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
        ci = "-" if not math.isfinite(e["lo_pct"]) else f"{e['lo_pct']:+.1f}% .. {e['hi_pct']:+.1f}%"
        pct = "-" if math.isnan(e["pct"]) else f"{e['pct']:+.1f}%"
        t.add_row(e["a"], e["b"], e.get("design") or "", f"{e['n']} {e.get('unit') or 'epoch'}s",
                  pct, ci, f"[{style[e['verdict']]}]{e['verdict']}[/]")
    console.print(t)
    m = result["meta"]
    if m.get("workload_about"):
        console.print(f"[dim]workload: {m['workload_about']}[/dim]")
    console.print(f"[dim]{m.get('workload')} workload, {_scale(m)}, {_clients(m)}, "
                  f"{m.get('run_s')} s runs after "
                  f"{m.get('warm_s')} s warm-up, {_buffers(m)} {m.get('shared_buffers')}"
                  f"{_buffers_source(m)}; stopped: "
                  f"{'interrupted' if m.get('interrupted') else m.get('stopped', '?')}[/dim]")
    for line in (*origin_lines(m), server_line(m), defaults_line(m), _design(m),
                 *phase_lines(result),
                 _steal(result), _dtlb(result), *knob_lines(result)):
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
        f"<td>{html.escape(e.get('design') or '')}</td><td>{e['n']} {e.get('unit') or 'epoch'}s</td>"
        f"<td>{e['pct']:+.2f}%</td><td>{e['lo_pct']:+.2f}% .. {e['hi_pct']:+.2f}%</td>"
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
<p>{html.escape(str(m.get('workload')))} workload, {_scale(m)},
{_clients(m)}, {m.get('run_s')} s measured per run after {m.get('warm_s')} s
warm-up, {_buffers(m)}
{html.escape(str(m.get('shared_buffers')) + _buffers_source(m))}, {_server(m)}.
{html.escape(defaults_line(m))}
Stopped: {'interrupted' if m.get('interrupted') else html.escape(str(m.get('stopped', '?')))}.
{_steal(result)} {html.escape(_dtlb(result))}</p>
{"".join(f"<p>{html.escape(a)}</p>" for a in origin_lines(m))}
<h2>Should I apply the plan?</h2>
{"".join(f"<p>{html.escape(a)}</p>" for a in answer(result) + advice(result))}
<p>{html.escape(_design(m))}</p>
{"".join(f"<p>{html.escape(a)}</p>" for a in phase_lines(result))}
<p>{html.escape(str(m.get('workload_about') or ''))}</p>
<h2>Verdict</h2><table><tr><th>A</th><th>B</th><th>measured</th><th>units</th>
<th>effect of B</th><th>95% CI</th><th>verdict</th></tr>{rows}</table>
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


# The comparison a plan is judged by: the host as it is against the host as apply makes it.
PLAN = ("current", "recommended")


def answer(result: dict) -> list[str]:
    """The report's first words: should I apply the plan? The plan's comparison (current
    against recommended), its verdict in a sentence with the estimate and interval, and how
    it was measured. Nothing when the run did not compare them."""
    e = next((e for e in result["effects"] if (e["a"], e["b"]) == PLAN), None)
    if e is None:
        return []
    m = result["meta"]
    band = m.get("band_pct", 1.0)
    if not math.isfinite(e["lo_pct"]):
        return ["Apply the plan? Not decided: fewer than two "
                f"{e.get('unit') or 'epoch'}s were measured; give validate more time."]
    est = f"{e['pct']:+.1f}% TPS (95% CI {e['lo_pct']:+.1f} .. {e['hi_pct']:+.1f}%)"
    head = {
        "improved": f"Apply the plan? Yes: it gained {est}.",
        "regressed": f"Apply the plan? Not for speed: it lost {est}.",
        "no meaningful change": f"Apply the plan? For speed it makes no difference beyond "
                                f"±{band:g}% here: {est}.",
        "inconclusive": f"Apply the plan? Not decided by this run: {est} reaches beyond "
                        f"±{band:g}% on {'both sides' if e['lo_pct'] < 0 < e['hi_pct'] else 'one side'}"
                        "; give it a longer --duration, or --workload select to isolate the "
                        "memory effect.",
    }[e["verdict"]]
    unit = e.get("unit") or "epoch"
    how = (f"Measured {e.get('design') or m.get('design')}, {e['n']} {unit}s"
           + (" side by side" if e.get("design") in ("simultaneous", "resident") else "")
           + f", {m.get('workload')} workload, {_buffers(m)} {m.get('shared_buffers')}.")
    return [head, how]


def phase_lines(result: dict) -> list[str]:
    """With THP phases: what they were and the plan's comparisons phase by phase (whether an
    effect depends on the THP setting it ran under; the verdict uses every epoch)."""
    m = result["meta"]
    phases = m.get("phases") or []
    if not phases:
        return []
    out = [f"THP phases: {' / '.join(phases)} in turn, one per epoch (order turned every "
           f"cycle); {', '.join(m.get('side_by_side') or [])} side by side in every epoch; "
           "THP comparisons pair the phases of one cycle on current's server."]
    for e in result["effects"]:
        per = e.get("by_phase") or {}
        if per:
            out.append(f"{e['a']} -> {e['b']} by THP phase: " + "; ".join(
                f"{ph} {x['pct']:+.1f}%" + (f" ({x['lo_pct']:+.1f} .. {x['hi_pct']:+.1f}%)"
                                            if math.isfinite(x["lo_pct"]) else "")
                + f", {x['n']} epochs" for ph, x in per.items()))
    return out


def knob_lines(result: dict) -> list[str]:
    """Every knob each variant changed, what was skipped and why, and what was left alone."""
    m = result["meta"]
    out = [f"{v}: " + ("; ".join(k) if k else "nothing changed")
           for v, k in (m.get("variant_knobs") or {}).items()]
    if any(v.startswith("thp-") for v in m.get("variants", [])) and m.get("thp_defrag"):
        out.append(f"THP defrag left as the host has it: {m['thp_defrag']}")
    out += [f"{v} skipped: {why}" for v, why in (m.get("skipped") or {}).items()]
    return out


def advice(result: dict) -> list[str]:
    """What the evidence on THP implies, next to what `check` recommends for this host
    (meta.plan_thp, read from check's own plan when the run began): a verdict that favours a
    mode check does not recommend says why check keeps its choice, so the two never leave a
    reader with opposite advice. An A/A comparison says how far this host's noise reaches."""
    m = result["meta"]
    plan, prof = m.get("plan_thp") or {}, m.get("profile") or "oltp"
    out = []
    for e in result["effects"]:
        if kind(e["a"]) == kind(e["b"]):
            out.append(_aa_advice(e))
            continue
        if e["verdict"] not in ("improved", "regressed"):
            continue
        won = e["b"] if e["verdict"] == "improved" else e["a"]
        if e["b"] == "thp-shmem":
            if won != "thp-shmem":
                out.append(f"Shared-memory THP changed TPS by {e['pct']:+.1f}%: it did not help "
                           "here; check recommends shmem_enabled="
                           f"{plan.get('shmem_enabled', '?')} (profile {prof}).")
                continue
            keeps = plan.get("shmem_enabled", "?")
            why = ", as measured" if keeps in ("always", "force") else " for that reason"
            out.append(
                f"Shared-memory THP gained {e['pct']:+.1f}%. shmem_enabled=always applies to the "
                "whole host: every tmpfs, /dev/shm, SysV segment and memfd may get huge pages, "
                "with their memory and compaction costs. Static huge pages (the recommended "
                "variant, the engine's huge page setting on a reserved pool) give the shared "
                "buffers the same large pages without it. "
                f"check recommends shmem_enabled={keeps} (profile {prof}){why}.")
        elif "thp-always" in (e["a"], e["b"]) and "thp-never" in (e["a"], e["b"]):
            rec = plan.get("enabled", "?")
            if won == "thp-always":
                out.append(
                    f"THP enabled=always beat never by {abs(e['pct']):.1f}% here. It reaches "
                    "private memory only (not shared memory); "
                    + (f"check recommends enabled={rec} (profile {prof}) because always brings "
                       "latency spikes and memory bloat to other processes (Redis's and MongoDB "
                       "<= 7.0's documentation); a process can still ask for THP under madvise."
                       if rec != "always" else
                       f"check recommends enabled=always (profile {prof}), as measured."))
            else:
                out.append(f"THP enabled=never beat always by {abs(e['pct']):.1f}% here; check "
                           f"recommends enabled={rec} (profile {prof})"
                           + (": only processes that ask for THP (madvise) get it."
                              if rec == "madvise" else "." if rec == "never" else
                              ": consider a profile with enabled=madvise or never."))
    return out


def _aa_advice(e: dict) -> str:
    """What an A/A comparison (one variant against itself) says: the noise of this host and
    design in this budget, and whether the statistics stayed honest."""
    head = (f"A/A ({e['b']} against {e['a']}, nothing differing): {e['pct']:+.1f}%, 95% CI "
            f"{e['lo_pct']:+.1f} .. {e['hi_pct']:+.1f}%, {e['verdict']}. ")
    if e["verdict"] in ("improved", "regressed"):
        return head + ("Two identical servers should not differ: at 95% one A/A run in 20 "
                       "does by chance, more often the host changed during the run (steal, "
                       "a neighbour, memory pressure). Repeat it before trusting the other "
                       "verdicts of this host.")
    return head + (f"This is the noise here: with this budget and design, effects within "
                   f"about ±{e['half_width_pct']:.1f}% cannot be told from it.")


def block_ratios(result: dict) -> list[tuple[str, str, list[tuple[int, float]]]]:
    """Per comparison, TPS_B / TPS_A unit by unit (geometric means of each unit's runs; an
    epoch, a block in the restart design, a cycle for THP phases): the spread the CI comes
    from."""
    from .measure import Sample
    from .stats import geomean, phase_samples, unit
    from .variants import host_wide
    samples = [Sample(**s) for s in result["samples"]]
    phases = result.get("meta", {}).get("phases") or []
    out = []
    for e in result["effects"]:
        pair = (e["a"], e["b"])
        by: dict[tuple[int, str], list[float]] = {}
        for s in (phase_samples(samples, phases) if phases and any(map(host_wide, pair))
                  else samples):
            by.setdefault((unit(s), s.variant), []).append(s.tps)
        units = sorted({u for u, v in by if v == e["a"]} & {u for u, v in by if v == e["b"]})
        out.append((e["a"], e["b"], [(u, geomean(by[(u, e["b"])]) / geomean(by[(u, e["a"])]))
                                     for u in units]))
    return out


def _design(m: dict) -> str:
    """Which design ran and why (runner.py's docstring describes the three)."""
    d = m.get("design") or "restart"
    what = {"restart": "every run restarts the server in its variant",
            "resident": "one server per variant, resident at once, alternating runs",
            "simultaneous": "one server per variant, measured at the same time on their own "
                            "CPUs, rotating"}.get(d, d)
    rounds = f", {m['rounds']} rounds per epoch" if m.get("rounds") else ""
    if m.get("swap_s"):
        rounds += f", trading CPUs every {m['swap_s']:g} s"
    why = f" ({m['design_reason']})" if m.get("design_reason") else ""
    return f"design: {d}: {what}{rounds}{why}"


def _dtlb(result: dict) -> str:
    """dTLB counters per variant (perf stat, where a PMU exists), or why there are none."""
    state = result["meta"].get("dtlb_counters")
    if not state:
        return ""
    if state != "present":
        return f"dTLB counters: {state}."
    parts = []
    for v in result["meta"].get("variants", []):
        runs = [s["dtlb"] for s in result["samples"] if s["variant"] == v and s.get("dtlb")]
        if not runs:
            continue
        med = {}
        for ev in ("dTLB-load-misses", "dTLB-store-misses", "dtlb_load_misses.walk_active"):
            vals = sorted(r[ev] for r in runs if r.get(ev) is not None)
            if vals:
                med[ev] = vals[len(vals) // 2]
        if med:
            parts.append(f"{v}: " + ", ".join(f"{k} {x:,.0f}" for k, x in med.items()))
    return "dTLB counters (perf stat -a, median per run): " + ("; ".join(parts) or
                                                             "none counted") + "."


def _steal(result: dict) -> str:
    """CPU steal (/proc/stat) during the measured parts: on a VM, time the hypervisor gave to
    other guests shows up as noise in every variant."""
    vals = [s["steal_pct"] for s in result["samples"] if s.get("steal_pct") is not None]
    if not vals:
        return ""
    return (f"CPU steal during the measured parts: up to {max(vals):.1f}% "
            f"(median {sorted(vals)[len(vals) // 2]:.1f}%).")


def origin_lines(m: dict) -> list[str]:
    """What was measured: the workload's origin and the data's, and for a replay how far it
    matched the log (its unmeasured first replay's errors; every run is refused above the
    share the driver allows)."""
    out = [f"{k} origin: {m[f'{k}_origin']}" for k in ("workload", "data")
           if m.get(f"{k}_origin")]
    cal = m.get("calibration")
    if cal:
        out.append("TPS here: statements per second over each run's replay")
        out.append(f"replay check: the unmeasured first replay ran {cal['statements']:,} "
                   f"statements on {cal.get('connections') or '?'} connections in "
                   f"{cal['seconds']:.1f} s, {cal['errors']} with an error; the clients "
                   "setting does not apply (each logged session replays on its own "
                   "connection)")
    return out


def _clients(m: dict) -> str:
    return "the logged sessions" if m.get("bench") == "replay" else f"{m.get('clients')} clients"


def _scale(m: dict) -> str:
    if m.get("scale") == 0:  # the user's data (a copy), not generated at a scale
        return "the user's data"
    b = BENCHMARKS.get(m.get("bench") or "")
    loaded = f" (loaded in {m['load_s']:.0f} s)" if m.get("load_s") is not None else ""
    return f"{m.get('bench')} {b.unit if b else 'scale'} {m.get('scale')}{loaded}"


def _buffers(m: dict) -> str:
    return m.get("buffers_setting") or "buffers"


def server_line(m: dict) -> str:
    """Which server binary ran, and why that one (the user's major where one runs)."""
    return f"server: {m.get('server_version')}" + "".join(
        f", {m[k]}" for k in ("server_binary", "prewarm_note", "settings_note") if m.get(k))


def defaults_line(m: dict) -> str:
    """The defaults this host decided (clients by its CPUs, the scale by its disk)."""
    notes = m.get("default_notes") or []
    return ("chosen for this host: " + "; ".join(notes)) if notes else ""


def _buffers_source(m: dict) -> str:
    """Where the scratch server's size came from, unless the user gave it."""
    src = m.get("buffers_source")
    return f" ({src})" if src and src != "given" else ""


def _server(m: dict) -> str:
    return html.escape(server_line(m).removeprefix("server: "))
