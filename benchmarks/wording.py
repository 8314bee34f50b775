"""validate's verdict in words: the answer first, then each phase, the knobs each variant ran
with, advice, and where the servers and their sizes came from. The terminal table and the
HTML page (report.py) print these lines; neither words a verdict of its own."""

from __future__ import annotations

import math

from . import stats
from .drivers import BENCHMARKS
from .variants import kind


# The comparison a plan is judged by: the host as it is against the host as apply makes it.
PLAN = ("current", "recommended")


def units(e: dict) -> str:
    """How many units a comparison was paired over: "3 epochs", "1 cycle"."""
    n, unit = e.get("n") or 0, e.get("unit") or "epoch"
    return f"{n} {unit}{'' if n == 1 else 's'}"


def effect_words(e: dict) -> tuple[str, str]:
    """A comparison's estimate and its 95% interval in words: an effect measured over fewer
    than two units has no interval (stats.effect), and says so instead of infinities."""
    pct, lo, hi = e.get("pct"), e.get("lo_pct"), e.get("hi_pct")
    est = f"{pct:+.2f}%" if isinstance(pct, (int, float)) and math.isfinite(pct) else "none"
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (lo, hi)):
        return est, f"none: {units(e)} measured, at least two are needed"
    return est, f"{lo:+.2f}% .. {hi:+.2f}%"


def answer(result: dict) -> list[str]:
    """The report's first words: should I apply the plan? The plan's comparison (current
    against recommended), its verdict in a sentence with the estimate and interval, and how
    it was measured. A run that did not compare them says so, and what it compared."""
    e = next((e for e in result["effects"] if (e["a"], e["b"]) == PLAN), None)
    if e is None:
        pairs = [f"{x['b']} against {x['a']}" for x in result["effects"]]
        return ["Apply the plan? This run did not measure it (recommended against current)"
                + (f"; it compared {', '.join(pairs)}, below" if pairs else "")
                + ". validate's default --variants measure the plan."]
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
        "inconclusive": f"Apply the plan? Not decided by this run: {est} reaches "
                        f"{beyond(e['lo_pct'], e['hi_pct'], band)}; give it a longer --duration"
                        + isolating(m) + ".",
    }[e["verdict"]]
    unit = e.get("unit") or "epoch"
    how = (f"Measured {design_of(e, m)}, {e['n']} {unit}s"
           + (" side by side" if design_of(e, m) in ("simultaneous", "resident") else "")
           + f", {m.get('workload')} workload, {buffers_word(m)} {m.get('shared_buffers')}."
           + strata_words(e))
    return [head, how]


def beyond(lo: float, hi: float, band: float) -> str:
    """Where an undecided interval leaves the band: below it, above it or both."""
    if lo < -band and hi > band:
        return f"beyond ±{band:g}% on both sides"
    return f"below -{band:g}%" if lo < -band else f"above +{band:g}%"


def isolating(m: dict) -> str:
    """The advice to run the benchmark's workload that isolates the memory effect, where it
    has one and this run measured another (drivers.Benchmark.isolates)."""
    b = BENCHMARKS.get(m.get("bench") or "")
    if b is None or not b.isolates or m.get("workload") == b.isolates:
        return ""
    return f", or --workload {b.isolates} to isolate the memory effect"


def strata_words(e: dict) -> str:
    """How the interval was made where the server placements were strata, with or without a
    line over the run each (stats.paired_effect), and whether it was adjusted for the CPUs'
    speed; nothing for the plain paired t."""
    k = e.get("strata") or 1
    lines = (", each placement's level a straight line over the run (separate regression "
             "lines)", ", or one growing slower,") if e.get("drift") else ("", "")
    words = "" if k < 2 else (
        f" Its interval is a paired t stratified by server placement ({k} placements, "
        f"weighted alike){lines[0]}, so a server faster than its twin{lines[1]} does not "
        "widen it.")
    return words + speed_words(e)


def speed_words(e: dict) -> str:
    """How the effect was adjusted for the CPUs' own speed (stats.paired_effect, adjust.py),
    or why it was not where their speeds were read; nothing where they were not."""
    sd = e.get("speed_sd_pct")
    if e.get("speed_slope") is not None:
        return (" It is adjusted for the speed of the CPUs each side ran on, read by a probe "
                "beside the servers (analysis of covariance, slope "
                f"{e['speed_slope']:.2f}): a virtual CPU that ran slower for a while does not "
                "move it.")
    if sd is None or not math.isfinite(sd):
        return ""
    # a result written before the reason was kept: steady is the one reason its spread shows
    why = e.get("speed_unfit", "steady" if sd < 100 * stats.SPEED_MIN_SD else None)
    if why == "steady":
        return (f" The CPUs' speeds, read beside the servers, moved {sd:.2f}% (sd of their "
                f"ratio), under the {100 * stats.SPEED_MIN_SD:.1f}% from which an adjustment "
                "for them pays: not adjusted.")
    if why == "singular":
        return (f" The CPUs' speeds moved {sd:.2f}% but in step with the servers' placements "
                "(or their lines over the run), so their part cannot be told from the "
                "placements' own: not adjusted for them.")
    if why == "few epochs":
        return (" Too few epochs to adjust for the CPUs' speed as well (that needs "
                f"{stats.SPEED_MIN_DF} degrees of freedom after it).")
    return ""


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
    design in this budget, whether the statistics stayed honest, and how its interval was
    made (the same way as the plan's: a reader compares the two)."""
    head = (f"A/A ({e['b']} against {e['a']}, nothing differing): {e['pct']:+.1f}%, 95% CI "
            f"{e['lo_pct']:+.1f} .. {e['hi_pct']:+.1f}%, {e['verdict']}. ")
    if e["verdict"] in ("improved", "regressed"):
        return head + ("Two identical servers should not differ: at 95% one A/A run in 20 "
                       "does by chance, more often the host changed during the run (steal, "
                       "a neighbour, memory pressure). Repeat it before trusting the other "
                       "verdicts of this host." + strata_words(e))
    return head + (f"This is the noise here: with this budget and design, effects within "
                   f"about ±{e['half_width_pct']:.1f}% cannot be told from it."
                   + strata_words(e))


def block_ratios(result: dict) -> list[tuple[str, str, list[tuple[int, float]]]]:
    """Per comparison, TPS_B / TPS_A unit by unit (geometric means of each unit's runs; an
    epoch, a block in the restart design, a cycle for THP phases): the spread the CI comes
    from."""
    from .measure import Sample
    from .stats import geomean, phase_samples, unit
    from .variants import host_wide
    samples = [Sample.of(s) for s in result["samples"]]
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


def design_of(e: dict, m: dict) -> str:
    """The design an effect was measured in: its own, else the run's; a result written
    before validate recorded a design ran the restart design, the only one then."""
    return e.get("design") or m.get("design") or "restart"


def design_line(m: dict) -> str:
    """Which design ran and why (runner.py's docstring describes the three)."""
    d = design_of({}, m)
    what = {"restart": "every run restarts the server in its variant",
            "resident": "one server per variant, resident at once, alternating runs",
            "simultaneous": "one server per variant, measured at the same time on their own "
                            "CPUs, rotating"}.get(d, d)
    r = m.get("rounds")
    rounds = f", {r} round{'' if r == 1 else 's'} per epoch" if r else ""
    if m.get("swap_s"):
        rounds += f", trading CPUs every {m['swap_s']:g} s"
    why = f" ({m['design_reason']})" if m.get("design_reason") else ""
    return f"design: {d}: {what}{rounds}{why}"


def dtlb_line(result: dict) -> str:
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


def steal_line(result: dict) -> str:
    """CPU steal (/proc/stat) during the measured parts: on a VM, time the hypervisor gave to
    other guests shows up as noise in every variant."""
    vals = [s["steal_pct"] for s in result["samples"] if s.get("steal_pct") is not None]
    if not vals:
        return ""
    return (f"CPU steal during the measured parts: up to {max(vals):.1f}% "
            f"(median {sorted(vals)[len(vals) // 2]:.1f}%).")


def measured_line(m: dict) -> str:
    """How much of the run's time measured: the rest made, loaded, (re)started and
    prewarmed the servers and switched the knobs between epochs. The run's time is its setup
    (setup_s: the servers made and loaded) and what followed (elapsed_s)."""
    after, measured = m.get("elapsed_s"), m.get("measured_s")
    if not after or measured is None:
        return ""
    took = after + (m.get("setup_s") or 0)
    return (f"Measured {measured:,.0f} s of the {took:,.0f} s this run took "
            f"({100 * measured / took:.0f}%); the rest made, loaded, started and prewarmed the "
            "servers and switched them between runs.")


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


def clients_words(m: dict) -> str:
    return "the logged sessions" if m.get("bench") == "replay" else f"{m.get('clients')} clients"


def scale_words(m: dict) -> str:
    if m.get("scale") == 0:  # the user's data (a copy), not generated at a scale
        return "the user's data"
    b = BENCHMARKS.get(m.get("bench") or "")
    loaded = f" (loaded in {m['load_s']:.0f} s)" if m.get("load_s") is not None else ""
    return f"{m.get('bench')} {b.unit if b else 'scale'} {m.get('scale')}{loaded}"


def buffers_word(m: dict) -> str:
    return m.get("buffers_setting") or "buffers"


def server_line(m: dict) -> str:
    """Which server binary ran, and why that one (the user's major where one runs)."""
    ver = m.get("server_version") or m.get("pg_version")  # the key of the first results
    return f"server: {ver or 'its version was not recorded'}" + "".join(
        f", {m[k]}" for k in ("server_binary", "prewarm_note", "settings_note") if m.get(k))


def runs_words(m: dict, measured: str = "measured per run") -> str:
    """How long each run measured and warmed up; a length the result did not record is
    said so."""
    run = f"{m['run_s']} s" if m.get("run_s") is not None else "runs of unrecorded length"
    warm = f"after {m['warm_s']} s warm-up" if m.get("warm_s") is not None else \
        "after a warm-up of unrecorded length"
    return f"{run} {measured} {warm}"


def defaults_line(m: dict) -> str:
    """The defaults this host decided (clients by its CPUs, the scale by its disk)."""
    notes = m.get("default_notes") or []
    return ("chosen for this host: " + "; ".join(notes)) if notes else ""


def buffers_source(m: dict) -> str:
    """Where the scratch server's size came from, unless the user gave it."""
    src = m.get("buffers_source")
    return f" ({src})" if src and src != "given" else ""

