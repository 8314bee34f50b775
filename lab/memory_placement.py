#!/usr/bin/env python3
"""Does where a buffer's memory sits make it slower, and does that move? A side-by-side
validate run found one server of the pair several percent faster than its twin for minutes,
whichever variant it ran, in either direction from run to run, and growing or shrinking
within a run (lab/server_effect.py). The servers trade CPUs every few seconds, so a CPU's own
speed falls on both alike; what each keeps is its memory. In a VM, guest memory is backed by
the hypervisor's own pages (huge or not, on one socket or the other), which the guest cannot
see. This measures it from inside with a pointer chase through 4 KiB pages
(lab/memory_chase.c, built here with the system's C compiler):

    python3 lab/memory_placement.py map   OUT.jsonl [MIB] [SECONDS]    # by guest-physical GiB
    python3 lab/memory_placement.py fresh OUT.jsonl [MIB] [PLACEMENTS] [SECONDS]
    python3 lab/memory_placement.py pair  OUT.jsonl [MIB] [SECONDS] [SLICE_MS]
    python3 lab/memory_placement.py read  OUT.jsonl

- map: one large buffer, its pages grouped by the guest-physical GiB they sit in, each group
  walked on each CPU, twice over: does speed follow the physical address?
- fresh: two new buffers A and B for each placement (as two servers started take new
  memory), walked in turns on each CPU: how far apart two buffers of one size come out, and
  does the gap agree on both CPUs (memory) or differ (the CPUs)? Each buffer's pages are
  read off /proc/self/pagemap: over how many 2 MiB guest-physical frames, in which GiB.
- pair: two shared buffers of a server's size, a walker on each CPU walking both in turns
  for minutes (as two servers side by side): does the gap between them hold, drift or
  turn?

Root (for /proc/self/pagemap), on a machine otherwise quiet. Standard library only. OUT may
be kept gzipped (results/ keeps it so, as NAME.jsonl.gz; the plain name finds it)."""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import tempfile

from vmstat_during import samples_of

HERE = os.path.dirname(os.path.abspath(__file__))


def run(mode: str, out: str, args: list[str]) -> None:
    defaults = {"map": ["12288", "0.5"], "fresh": ["128", "20", "2"],
                "pair": ["128", "300", "250"]}[mode]
    args = args + defaults[len(args):]
    with tempfile.TemporaryDirectory(prefix="memory_chase.") as d, open(out, "w") as f:
        exe = os.path.join(d, "memory_chase")
        subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "memory_chase.c")],
                       check=True)
        subprocess.run([exe, mode, *args], stdout=f, check=True)
    read(out)


def pct(x: float) -> str:
    return f"{100 * (math.exp(x) - 1):+.1f}%"


def read_map(rows: list[dict]) -> None:
    full = max(r["pages"] for r in rows)  # a GiB only partly in the buffer walks fewer pages
    rows = [r for r in rows if r["pages"] == full]
    by = {}
    for r in rows:
        by.setdefault(r["gib"], {})[(r["round"], r["cpu"])] = r["ns"]
    print("| guest-physical GiB | pages | ns a step, CPU 0 (rounds 1, 2) | CPU 1 (rounds 1, 2) |")
    print("|---:|---:|---|---|")
    pages = {r["gib"]: r["pages"] for r in rows}
    for g in sorted(by):
        v = by[g]
        print(f"| {g} | {pages[g]} | {v.get((0, 0), 0):.1f}, {v.get((1, 0), 0):.1f} | "
              f"{v.get((0, 1), 0):.1f}, {v.get((1, 1), 0):.1f} |")
    means = {g: statistics.mean(v.values()) for g, v in by.items()}
    lo, hi = min(means.values()), max(means.values())
    rep = [math.log(v[(1, c)] / v[(0, c)]) for v in by.values() for c in (0, 1)
           if (0, c) in v and (1, c) in v]
    print(f"\nslowest GiB over fastest: {pct(math.log(hi / lo))}; a GiB's round 2 over round "
          f"1: sd {100 * statistics.pstdev(rep):.1f}%")


def read_fresh(rows: list[dict]) -> None:
    print("| placement | A ns, CPU 0 / 1 | B ns, CPU 0 / 1 | B over A, CPU 0 / 1 | 2 MiB frames, A / B | "
          "share in the most-used GiB, A / B |")
    print("|---:|---|---|---|---|---|")
    by = {}
    for r in rows:
        by.setdefault(r["placement"], {})[r["cpu"]] = r
    g0, g1, spread = [], [], []
    for p, v in sorted(by.items()):
        top = max(v[0]["a_by_gib"], key=lambda g: v[0]["a_by_gib"][g] + v[0]["b_by_gib"].get(g, 0))
        gap = [math.log(v[c]["b_ns"] / v[c]["a_ns"]) for c in (0, 1)]
        g0.append(gap[0])
        g1.append(gap[1])
        spread.append(v[0]["b_2m"] - v[0]["a_2m"])
        print(f"| {p} | {v[0]['a_ns']:.1f} / {v[1]['a_ns']:.1f} | {v[0]['b_ns']:.1f} / "
              f"{v[1]['b_ns']:.1f} | {pct(gap[0])} / {pct(gap[1])} | {v[0]['a_2m']} / "
              f"{v[0]['b_2m']} | GiB {top}: {v[0]['a_by_gib'].get(top, 0):.2f} / "
              f"{v[0]['b_by_gib'].get(top, 0):.2f} |")
    if len(g0) < 3:
        return  # too few placements for a spread or a correlation
    both = [(a + b) / 2 for a, b in zip(g0, g1)]
    diff = [a - b for a, b in zip(g0, g1)]
    print(f"\nB over A across placements: sd {100 * statistics.pstdev(both):.1f}% (what the "
          f"placement moves); CPU 0 against CPU 1 within one: sd "
          f"{100 * statistics.pstdev(diff):.1f}% (the walks' noise and the CPUs); the two "
          f"CPUs' gaps correlate r = {statistics.correlation(g0, g1):+.2f}")
    if len(set(spread)) > 1:
        print(f"B's gap against how many more 2 MiB frames B's pages spread over than A's: "
              f"r = {statistics.correlation(spread, both):+.2f}")


def read_pair(rows: list[dict]) -> None:
    head = rows[0]
    print(f"A's pages at mean guest-physical GiB {head['a_gib']} over {head['a_2m']} 2 MiB "
          f"frames, B's at {head['b_gib']} over {head['b_2m']}\n")
    samples = rows[1:]
    span = max(r["t"] for r in samples)
    width = 30.0
    print("| seconds | B over A, CPU 0 | CPU 1 | A ns, CPU 0 / 1 |")
    print("|---|---:|---:|---|")
    t = 0.0
    while t + width <= span + 1:  # whole bins only: a last stub of a slice or two says little
        got = {c: [r for r in samples if r["cpu"] == c and t <= r["t"] < t + width]
               for c in (0, 1)}
        g = {c: statistics.mean(math.log(r["b_ns"] / r["a_ns"]) for r in v)
             for c, v in got.items() if v}
        a = {c: statistics.mean(r["a_ns"] for r in v) for c, v in got.items() if v}
        if len(g) == 2:
            print(f"| {t:.0f}-{t + width:.0f} | {pct(g[0])} | {pct(g[1])} | "
                  f"{a[0]:.1f} / {a[1]:.1f} |")
        t += width
    for c in (0, 1):
        x = [math.log(r["b_ns"] / r["a_ns"]) for r in samples if r["cpu"] == c]
        half = len(x) // 2
        print(f"\nCPU {c}: B over A {pct(statistics.mean(x))} over the run (first half "
              f"{pct(statistics.mean(x[:half]))}, second {pct(statistics.mean(x[half:]))}); "
              f"a slice's sd {100 * statistics.pstdev(x):.1f}%")


def read(path: str) -> None:
    rows = samples_of(path)
    {"map": read_map, "fresh": read_fresh, "pair": read_pair}[rows[0]["mode"]](rows)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "read":
        read(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] in ("map", "fresh", "pair"):
        run(sys.argv[1], sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
