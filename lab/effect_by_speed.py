#!/usr/bin/env python3
"""Does the plan's effect follow the machine's speed? The recorded runs of the card's
comparison at 128MB, grouped by the series they ran in.

    python3 lab/effect_by_speed.py lab/results/*.json

Every `validate --json --output` file of PostgreSQL's TPC-B at shared_buffers 128MB that
compares recommended over current first (the card's command, and the series that repeat it;
8 GB runs, scripts, MariaDB and A/As are left out), with its current servers' median TPS (the
machine's speed that day: this VM type has run at several), the clients a server, the day it
ran and the effect it reported. The runs are grouped by series (series_of: the suite run a
name carries, else the name without its repetition's number); per series, the TPS range and
the inverse-variance weighted mean of the effects (se = half-width / 1.96). Last, for each
count of clients held by three series or more (the clients change the TPS too), the rank
correlation of the series' median TPS and their pooled effects.

Standard library only."""

from __future__ import annotations

import json
import re
import statistics
import sys
import time


def card_run(d: dict) -> tuple[float, float, float, str, int] | None:
    """(the current servers' median TPS, the effect in %, its half-width in %, the day its
    first run started, the clients a server) of a card comparison at 128MB, else None."""
    if not isinstance(d, dict) or not d.get("effects"):
        return None
    m, e = d.get("meta", {}), d["effects"][0]
    if (e.get("a"), e.get("b")) != ("current", "recommended"):
        return None
    if m.get("db", "postgres") != "postgres" or m.get("shared_buffers") != "128MB":
        return None
    if m.get("workload", "tpcb") != "tpcb" or m.get("script"):
        return None
    tps = [s["tps"] for s in d["samples"] if s["variant"] == "current" and s.get("tps")]
    if not tps:
        return None
    day = time.strftime("%m-%d", time.gmtime(d["samples"][0]["started"]))
    return (statistics.median(tps), e["pct"], (e["hi_pct"] - e["lo_pct"]) / 2, day,
            m.get("clients") or 0)


def series_of(path: str) -> str:
    """The series a result belongs to: the suite run its name carries (`after-10m-63-2`: 63;
    the lab's run numbers are 30 and up), else its name without the repetition's number
    (`series-10m-5`: series-10m)."""
    name = path.rsplit("/", 1)[-1].removesuffix(".json")
    found = re.search(r"-(\d{2})(?:-\d{1,2})?(?:-[a-z]+)?$", name)
    if found and int(found.group(1)) >= 30:
        return f"run {found.group(1)}"
    return re.sub(r"-\d{1,2}$", "", name)


def spearman(x: list[float], y: list[float]) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        for i, j in enumerate(order):
            r[j] = float(i)
        return r
    return statistics.correlation(ranks(x), ranks(y))


def main(paths: list[str]) -> None:
    groups: dict[str, list] = {}
    for p in paths:
        try:
            with open(p) as f:
                run = card_run(json.load(f))
        except (OSError, ValueError):
            continue
        if run is not None:
            groups.setdefault(series_of(p), []).append(run)
    print("| series | days | clients | runs | current TPS (median a run) | pooled effect | "
          "runs' effects |")
    print("|---|---|---|---:|---|---:|---|")
    by_clients: dict[str, tuple[list, list]] = {}
    for g, runs in sorted(groups.items(), key=lambda kv: statistics.median(
            r[0] for r in kv[1])):
        weighed = [(1 / (hw / 1.96) ** 2, pct) for _, pct, hw, *_ in runs if hw > 0]
        pooled = sum(w * pct for w, pct in weighed) / sum(w for w, _ in weighed)
        tps = [r[0] for r in runs]
        days = sorted({r[3] for r in runs})
        clients = "/".join(str(c) for c in sorted({r[4] for r in runs}))
        speeds, effects = by_clients.setdefault(clients, ([], []))
        speeds.append(statistics.median(tps))
        effects.append(pooled)
        print(f"| {g} | {', '.join(days)} | {clients} | {len(runs)} | "
              f"{min(tps):,.0f}-{max(tps):,.0f} | "
              f"{pooled:+.2f}% | " + ", ".join(f"{r[1]:+.1f}" for r in runs) + " |")
    print()
    for clients, (speeds, effects) in sorted(by_clients.items()):
        if len(speeds) > 2:  # the clients changed the TPS too: compared within one count
            print(f"{clients} clients: rank correlation of the series' TPS and pooled "
                  f"effects {spearman(speeds, effects):+.2f} over {len(speeds)} series")


if __name__ == "__main__":
    main(sys.argv[1:])
