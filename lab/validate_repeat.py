#!/usr/bin/env python3
"""Are validate's intervals honest across repeated runs of one command?

    python3 lab/validate_repeat.py RUN1.json RUN2.json ...   (`validate --json --output`)
    .venv/bin/python lab/validate_repeat.py --now RUN1.json ...  (as the checkout reports them)

For the first comparison of every result (the card's "Apply the plan?": current over
recommended), each run's estimate, 95% interval, half-width, verdict and epoch ratios; then,
over the runs:

- the pooled effect: the mean of all runs' epoch log ratios (every epoch weighs the same);
- coverage: how many runs' intervals hold the pooled effect, and (stricter, since the pooled
  effect includes the run itself) the pooled effect of the *other* runs;
- heterogeneity: Cochran's Q of the run estimates with weights 1/se^2 (se = half-width / t),
  its p-value from the chi-square with k-1 df, and I^2 = (Q - (k-1)) / Q (Higgins and
  Thompson 2002, Stat Med 21:1539). Intervals that are honest about their run leave Q near
  k-1 and I^2 near 0; a run-to-run component the interval does not see shows as I^2 > 0;
- verdicts: how many runs said each word, against how many would say "improved" if the
  pooled effect were the truth and each run's estimate scattered by its own se (normal
  approximation, the band as validate applies it).

Standard library only (--now: hpadvise too)."""

from __future__ import annotations

import json
import math
import statistics
import sys


def epoch_ratios(d: dict) -> list[float]:
    """The first comparison's per-epoch log ratios, as validate pairs them (stats.effects):
    the geometric mean of each variant's runs in the epoch."""
    e = d["effects"][0]
    out = []
    for ep in sorted({s["epoch"] for s in d["samples"] if s["epoch"] is not None}):
        a = [math.log(s["tps"]) for s in d["samples"]
             if s["epoch"] == ep and s["variant"] == e["a"] and s["tps"] > 0]
        b = [math.log(s["tps"]) for s in d["samples"]
             if s["epoch"] == ep and s["variant"] == e["b"] and s["tps"] > 0]
        if a and b and len(a) == len(b):
            out.append(statistics.fmean(b) - statistics.fmean(a))
    return out


def t975(df: int) -> float:
    # NIST/SEMATECH e-Handbook 1.3.6.7.2, two-sided 95%
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
             9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
             16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086}
    return table.get(df, 2.0)


def chi2_sf(q: float, k: int) -> float:
    """P(X > q) for chi-square with k degrees of freedom (series of the regularized lower
    incomplete gamma function, Numerical Recipes 6.2)."""
    a, x = k / 2, q / 2
    if x <= 0:
        return 1.0
    term = total = 1 / a
    n = 1
    while abs(term) > 1e-12 * abs(total) and n < 1000:
        term *= x / (a + n)
        total += term
        n += 1
    return max(0.0, 1 - total * math.exp(-x + a * math.log(x) - math.lgamma(a)))


def pct(v: float) -> float:
    return (math.exp(v) - 1) * 100


def recomputed(d: dict) -> dict:
    """The first comparison as the checkout's validate would report it from the run's own
    samples (`--now`: a rule of the statistics changed after the run)."""
    from dataclasses import asdict

    from hpadvise.benchmarks import measure, stats
    from hpadvise.benchmarks.variants import pairs_for
    m, e = d["meta"], d["effects"][0]
    samples = [measure.Sample.of(s) for s in d["samples"]]
    got = stats.comparisons(samples, pairs_for(m["variants"]), m.get("phases") or [],
                            m["band_pct"])[(e["a"], e["b"])]
    return {**e, **asdict(got), "half_width_pct": got.half_width_pct}


def main(paths: list[str]) -> int:
    now = "--now" in paths
    paths = [p for p in paths if p != "--now"]
    runs = []
    for p in paths:
        d = json.loads(open(p).read())
        e = recomputed(d) if now else d["effects"][0]
        lr = epoch_ratios(d)
        n = len(lr)
        m = statistics.fmean(lr)
        se = statistics.stdev(lr) / math.sqrt(n)
        cur = [x["tps"] for x in d["samples"] if x["variant"] == e["a"] and x["tps"] > 0]
        spd = [x["cpu_speed"] for x in d["samples"] if x.get("cpu_speed")]
        runs.append({"path": p, "lr": lr, "m": m, "se": se, "t": t975(n - 1), "e": e,
                     "tps": statistics.median(cur) if cur else None,
                     "speed": math.exp(statistics.fmean(map(math.log, spd))) if spd else None,
                     "band": d["meta"].get("band_pct", 1.0),
                     "measured": d["meta"].get("measured_s"),
                     "elapsed": d["meta"].get("elapsed_s")})
    print("| run | epochs | B over A, 95% CI | half-width | verdict | measured | epoch ratios |")
    print("|---|---:|---|---:|---|---:|---|")
    for i, r in enumerate(runs, 1):
        e = r["e"]
        share = (f"{r['measured'] / r['elapsed']:.0%}" if r["measured"] and r["elapsed"]
                 else "-")
        print(f"| {i} | {len(r['lr'])} | {e['pct']:+.1f}%, {e['lo_pct']:+.1f} .. "
              f"{e['hi_pct']:+.1f} | {e['half_width_pct']:.1f}% | {e['verdict']} | {share} | "
              + " ".join(f"{math.exp(x):.3f}" for x in r["lr"]) + " |")
    k = len(runs)
    if k < 2:
        return 0
    every = [x for r in runs for x in r["lr"]]
    pooled = statistics.fmean(every)
    print(f"\npooled over {k} runs, {len(every)} epochs: {pct(pooled):+.2f}%")
    hold = sum(r["m"] - r["t"] * r["se"] <= pooled <= r["m"] + r["t"] * r["se"] for r in runs)
    loo = 0
    for i, r in enumerate(runs):
        others = [x for j, o in enumerate(runs) if j != i for x in o["lr"]]
        loo += r["m"] - r["t"] * r["se"] <= statistics.fmean(others) <= r["m"] + r["t"] * r["se"]
    print(f"intervals holding the pooled effect: {hold} of {k}; "
          f"the pooled effect of the other runs: {loo} of {k}")
    w = [1 / r["se"] ** 2 for r in runs]
    mw = sum(wi * r["m"] for wi, r in zip(w, runs)) / sum(w)
    q = sum(wi * (r["m"] - mw) ** 2 for wi, r in zip(w, runs))
    i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    print(f"heterogeneity: Q = {q:.1f} on {k - 1} df (p = {chi2_sf(q, k - 1):.3f}), "
          f"I^2 = {i2:.0%}; sd of the run estimates {statistics.stdev(r['m'] for r in runs) * 100:.2f}"
          f"% against a median se of {statistics.median(r['se'] for r in runs) * 100:.2f}%")
    words = {}
    for r in runs:
        words[r["e"]["verdict"]] = words.get(r["e"]["verdict"], 0) + 1
    expect = 0.0
    for r in runs:
        # improved: the estimate above both t*se (the interval clears 0) and the band
        cut = max(r["t"] * r["se"], math.log(1 + r["band"] / 100))
        z = (cut - pooled) / r["se"]
        expect += 0.5 * math.erfc(z / math.sqrt(2))
    print("verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(words.items()))
          + f"; expected 'improved' if the pooled effect is true: {expect:.1f} of {k}")
    lag = []
    for r in runs:
        x = r["lr"]
        mx = statistics.fmean(x)
        den = sum((v - mx) ** 2 for v in x)
        if len(x) >= 3 and den:
            lag.append(sum((x[j] - mx) * (x[j + 1] - mx) for j in range(len(x) - 1)) / den)
    if lag:
        print(f"lag-1 autocorrelation of the epoch ratios, mean over runs: "
              f"{statistics.fmean(lag):+.2f} (independent epochs: about -1/n)")
    rep = as_reported(runs)
    moments(runs, rep)
    return 0


def moments(runs: list[dict], rep: list[tuple]) -> None:
    """Does a run's effect follow the host's moment? Each run's reported estimate against its
    baseline's median TPS and its CPUs' mean probed speed (the geometric mean of every run's
    cpu_speed): the slope of a weighted least squares of the estimates on each (weights
    1 / se^2, the fixed-effect meta-regression; Borenstein et al., Introduction to
    Meta-Analysis, 2009, ch. 20), with its z = slope / se."""
    print("\n| run | estimate | se | baseline TPS (median) | CPUs' speed (turns/us) |")
    print("|---|---:|---:|---:|---:|")
    for i, (r, (m, se, _, _)) in enumerate(zip(runs, rep), 1):
        spd = f"{r['speed']:.2f}" if r["speed"] else "-"
        tps = f"{r['tps']:,.0f}" if r["tps"] else "-"
        print(f"| {i} | {pct(m):+.2f}% | {se * 100:.2f}% | {tps} | {spd} |")
    for name in ("tps", "speed"):
        pts = [(r[name], m, se) for r, (m, se, _, _) in zip(runs, rep) if r[name]]
        if len(pts) < 3:
            continue
        w = [1 / se ** 2 for _, _, se in pts]
        xw = sum(wi * x for wi, (x, _, _) in zip(w, pts)) / sum(w)
        yw = sum(wi * y for wi, (_, y, _) in zip(w, pts)) / sum(w)
        sxx = sum(wi * (x - xw) ** 2 for wi, (x, _, _) in zip(w, pts))
        if not sxx:
            continue
        b = sum(wi * (x - xw) * (y - yw) for wi, (x, y, _) in zip(w, pts)) / sxx
        # the effect's change in points of ln ratio for a moment twice as fast as the mean
        print(f"the effect on {name}: {b * xw * 100:+.2f} points for twice the mean "
              f"({xw:,.2f}), z = {b / math.sqrt(1 / sxx):+.2f}")


def as_reported(runs: list[dict]) -> list[tuple]:
    """The same checks on the intervals the runs reported, which validate stratifies by
    server placement (stats.paired_effect: df = n - k with k placements, n - 2k where each
    placement's level is a line over the run): each run's
    estimate and se = half-width / t(df) on the log scale; the pooled effect is the
    inverse-variance weighted mean of the run estimates (the stratified estimate is a mean
    of placement means, not of epochs)."""
    rep = []
    for r in runs:
        e = r["e"]
        k = e.get("strata") or 1
        n = len(r["lr"])
        lo, hi = math.log1p(e["lo_pct"] / 100), math.log1p(e["hi_pct"] / 100)
        # lines per placement (stats.paired_effect's drift): n - 2k df; levels: n - k
        # and one less where the CPUs' speed was a covariate (speed_slope)
        t = t975((n - k * (2 if e.get("drift") else 1) if k >= 2 else n - 1)
                 - (e.get("speed_slope") is not None))
        rep.append((math.log1p(e["pct"] / 100), (hi - lo) / (2 * t), lo, hi))
    k = len(rep)
    w = [1 / se ** 2 for _, se, _, _ in rep]
    mw = sum(wi * m for wi, (m, _, _, _) in zip(w, rep)) / sum(w)
    hold = sum(lo <= mw <= hi for _, _, lo, hi in rep)
    loo = 0
    for i, (_, _, lo, hi) in enumerate(rep):
        wo = [wi for j, wi in enumerate(w) if j != i]
        mo = sum(wi * rep[j][0] for j, wi in enumerate(w) if j != i) / sum(wo)
        loo += lo <= mo <= hi
    q = sum(wi * (m - mw) ** 2 for wi, (m, _, _, _) in zip(w, rep))
    i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    print(f"\nas reported (stratified where the runs were): pooled {pct(mw):+.2f}% "
          f"(inverse-variance); intervals holding it: {hold} of {k}, holding the other runs' "
          f"pooled effect: {loo} of {k}; Q = {q:.1f} on {k - 1} df "
          f"(p = {chi2_sf(q, k - 1):.3f}), I^2 = {i2:.0%}; median se "
          f"{statistics.median(se for _, se, _, _ in rep) * 100:.2f}%, sd of the estimates "
          f"{statistics.stdev(m for m, _, _, _ in rep) * 100:.2f}%")
    # the between-run sd a random-effects model adds to every run's se (DerSimonian and Laird
    # 1986, Control Clin Trials 7:177): tau^2 = (Q - (k - 1)) / (sum w - sum w^2 / sum w)
    tau2 = max(0.0, (q - (k - 1)) / (sum(w) - sum(x * x for x in w) / sum(w)))
    cover = sum(abs(m - mw) <= (hi - lo) / 2 / se * math.sqrt(se * se + tau2)
                for m, se, lo, hi in rep)
    print(f"between runs (DerSimonian-Laird): tau = {math.sqrt(tau2) * 100:.2f}%; each run's "
          f"interval widened by it holds the pooled effect in {cover} of {k}")
    expect = 0.0
    for r, (_, se, lo, hi) in zip(runs, rep):
        cut = max((hi - lo) / 2, math.log(1 + r["band"] / 100))
        expect += 0.5 * math.erfc((cut - mw) / se / math.sqrt(2))
    print(f"expected 'improved' if the pooled effect is true: {expect:.1f} of {k}")
    return rep


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if sys.argv[1:] else (print(__doc__) or 2))
