#!/usr/bin/env python3
"""How much the two servers of a side-by-side run differ, whatever variant each runs:

    python3 lab/server_effect.py RUN1.json RUN2.json ...   (`validate --json --output`)

Side by side, the loaded original (server 0) and its copy (server 1) trade variants every
epoch. For the first comparison (recommended over current), each epoch's log ratio is
effect + delta x p, with p = +1 where recommended ran on server 0 and -1 where it ran on the
copy; so delta is half the mean difference between the placements' ratios, and the copy's
level against the original, whatever the variant, is -delta (the mean of the copy's log TPS
less the original's over the epochs: in an epoch with p = +1 that is -ratio, with p = -1
+ratio). Per run: that level over
the whole run and over its first and second halves (does it grow?), each server's median
TPS in its first and last three epochs, and the placement fit's residual sd next to the
plain epoch sd (what the stratified interval removes). Then, per run, the copy's level second
by second, the variants' effect taken out: its mean, median and quartiles.

    python3 lab/server_effect.py --spread RUN1.json ...

Over many runs: how far their levels spread beyond their own noise (spread()).

Standard library only."""

from __future__ import annotations

import json
import math
import statistics
import sys


def epochs(d: dict) -> list[tuple[int, float, int]]:
    """(epoch, log ratio B over A, p) for the first comparison."""
    e = d["effects"][0]
    out = []
    for ep in sorted({s["epoch"] for s in d["samples"] if s["epoch"] is not None}):
        got = {v: [s for s in d["samples"] if s["epoch"] == ep and s["variant"] == v
                   and s["tps"] > 0] for v in (e["a"], e["b"])}
        if not all(got.values()):
            continue
        la = statistics.fmean(math.log(s["tps"]) for s in got[e["a"]])
        lb = statistics.fmean(math.log(s["tps"]) for s in got[e["b"]])
        servers = {s.get("server") for s in got[e["b"]]}
        if len(servers) != 1 or None in servers:
            continue
        out.append((ep, lb - la, 1 if servers == {0} else -1))
    return out


def placement_fit(rows: list[tuple[int, float, int]]) -> tuple[float, float, float]:
    """The two placements' mean log ratios (p = +1, p = -1) and the residual sd about them,
    on n - 2 degrees of freedom."""
    mu = statistics.fmean(r for _, r, p in rows if p > 0)
    md = statistics.fmean(r for _, r, p in rows if p < 0)
    resid = [r - (mu if p > 0 else md) for _, r, p in rows]
    return mu, md, math.sqrt(sum(x * x for x in resid) / max(1, len(rows) - 2))


def level(rows: list[tuple[int, float, int]]) -> float | None:
    """The copy over the original, in %, from the placements' mean ratios."""
    up = [r for _, r, p in rows if p > 0]
    down = [r for _, r, p in rows if p < 0]
    if not up or not down:
        return None
    delta = (statistics.fmean(up) - statistics.fmean(down)) / 2
    return (math.exp(-delta) - 1) * 100


def seconds(d: dict, rows: list[tuple[int, float, int]]) -> list[float]:
    """The copy over the original, log, second by second after each run's warm-up, the
    variants' effect taken out (the run's mean epoch ratio, with the sign of the epoch's
    placement): a level that every second carries moves the whole spread of these, a level
    made of stalls only its tail."""
    effect = statistics.fmean(r for _, r, _ in rows)
    warm = d["meta"]["warm_s"] or 0
    out = []
    for ep, _, p in rows:
        on = {s["server"]: s for s in d["samples"] if s["epoch"] == ep}
        if {0, 1} - set(on) or not all(on[k].get("progress") for k in (0, 1)):
            continue
        orig, copy = ({round(t): v for t, v, *_ in on[k]["progress"] if t > warm}
                      for k in (0, 1))
        out += [math.log(copy[t] / orig[t]) + p * effect for t in orig
                if orig[t] > 0 and copy.get(t, 0) > 0]
    return out


def per_second(paths: list[str]) -> None:
    print("\n| run | seconds | copy vs original, per second: mean | median | quartiles |")
    print("|---|---:|---:|---:|---|")
    for i, p in enumerate(paths, 1):
        d = json.loads(open(p).read())
        x = sorted(seconds(d, epochs(d)))
        if len(x) < 4:
            continue
        q = [100 * (math.exp(x[int(f * (len(x) - 1))]) - 1) for f in (0.25, 0.75)]
        print(f"| {i} | {len(x)} | {100 * (math.exp(statistics.fmean(x)) - 1):+.1f}% | "
              f"{100 * (math.exp(statistics.median(x)) - 1):+.1f}% | {q[0]:+.1f} .. {q[1]:+.1f}% |")


def spread(paths: list[str]) -> int:
    """Across many runs, grouped by workload, buffers and whether both sides ran one
    variant (an A/A): each run's level with its standard error from the placement fit's
    residuals (as if the epochs were independent), z = level / se, and over a group's runs
    the mean of z squared, which is about 1 where runs differ only by their epochs' noise.
    Files that are not a side-by-side run with 3 epochs in each placement are left out."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for p in paths:
        try:
            d = json.loads(open(p).read())
        except (OSError, ValueError):
            continue
        if not isinstance(d, dict) or d.get("meta", {}).get("design") != "simultaneous" \
                or not d.get("effects"):
            continue
        rows = epochs(d)
        up = [r for _, r, q in rows if q > 0]
        down = [r for _, r, q in rows if q < 0]
        if len(up) < 3 or len(down) < 3:
            continue
        mu, md, sd = placement_fit(rows)
        se = sd * math.sqrt(1 / len(up) + 1 / len(down)) / 2
        e, m = d["effects"][0], d["meta"]
        same = e["a"].split("#")[0] == e["b"].split("#")[0]
        key = (f"{m.get('workload')} at {m.get('shared_buffers')}, "
               + (f"A/A ({e['a'].split('#')[0]})" if same else f"{e['b']} vs {e['a']}"))
        groups.setdefault(key, []).append(((md - mu) / 2 / se, (md - mu) / 2 * 100))
    if not groups:
        print("no side-by-side run with 3 epochs in each placement")
        return 1
    print("| runs | count | mean z^2 | abs z > 2 | abs level: median | largest | over 2% |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key, zs in sorted(groups.items()):
        big = sorted(abs(lv) for _, lv in zs)
        print(f"| {key} | {len(zs)} | {statistics.fmean(z * z for z, _ in zs):.1f} | "
              f"{sum(abs(z) > 2 for z, _ in zs)} | {statistics.median(big):.2f}% | "
              f"{big[-1]:.2f}% | {sum(x > 2 for x in big)} |")
    against_aa(groups)
    return 0


def against_aa(groups: dict[str, list[tuple[float, float]]]) -> None:
    """Where a workload and size has both A/As (current on both) and runs of two variants:
    do the latter's |z| run larger? The share of them above the A/As' largest |z|, the
    chance that none of the A/As would pass it were they drawn from the same spread, and
    the Mann-Whitney rank test on |z| (normal approximation, no ties expected)."""
    for key, aa in sorted(groups.items()):
        if not key.endswith("A/A (current)"):
            continue
        base = key[:-len("A/A (current)")]
        for other, runs in sorted(groups.items()):
            if not other.startswith(base) or "A/A" in other or len(runs) < 2 or len(aa) < 2:
                continue
            za, zb = [abs(z) for z, _ in aa], [abs(z) for z, _ in runs]
            top = max(za)
            share = sum(z > top for z in zb) / len(zb)
            ranked = sorted([(z, 0) for z in za] + [(z, 1) for z in zb])
            n1, n2 = len(za), len(zb)
            u = sum(i + 1 for i, (_, k) in enumerate(ranked) if k == 0) - n1 * (n1 + 1) / 2
            zu = (u - n1 * n2 / 2) / math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
            print(f"\n{other} against its A/As: the A/As' largest |z| {top:.2f}; "
                  f"{sum(z > top for z in zb)} of {n2} runs above it, chance that none of "
                  f"{n1} A/As would be: {(1 - share) ** n1:.4f}; Mann-Whitney on |z|: "
                  f"U = {u:.0f}, z = {zu:+.2f}, p = {math.erfc(abs(zu) / math.sqrt(2)):.3f}")


def main(paths: list[str]) -> int:
    print("| run | epochs | copy vs original | first half | second half | original TPS first/last "
          "| copy TPS first/last | epoch sd | residual sd |")
    print("|---|---:|---:|---:|---:|---|---|---:|---:|")
    for i, p in enumerate(paths, 1):
        d = json.loads(open(p).read())
        rows = epochs(d)
        half = len(rows) // 2
        tps = {}
        for srv in (0, 1):
            per = {}
            for s in d["samples"]:
                if s["server"] == srv and s["epoch"] is not None and s["tps"] > 0:
                    per.setdefault(s["epoch"], []).append(s["tps"])
            eps = sorted(per)
            tps[srv] = (statistics.median(x for e in eps[:3] for x in per[e]),
                        statistics.median(x for e in eps[-3:] for x in per[e]))
        rs = [r for _, r, _ in rows]
        resid_sd = placement_fit(rows)[2]

        def fmt(v):
            return "-" if v is None else f"{v:+.1f}%"
        print(f"| {i} | {len(rows)} | {fmt(level(rows))} | {fmt(level(rows[:half]))} | "
              f"{fmt(level(rows[half:]))} | {tps[0][0]:,.0f} / {tps[0][1]:,.0f} | "
              f"{tps[1][0]:,.0f} / {tps[1][1]:,.0f} | {statistics.stdev(rs) * 100:.2f}% | "
              f"{resid_sd * 100:.2f}% |")
    per_second(paths)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--spread"]:
        sys.exit(spread(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]) if sys.argv[1:] else (print(__doc__) or 2))
