#!/usr/bin/env python3
"""What the kernel did during each epoch of a validate run: sample /proc/vmstat, /proc/meminfo
(Dirty, Writeback, Cached) and /proc/stat once a second beside the run, then read the
samples against the run's epochs.

    python3 lab/vmstat_during.py sample OUT.jsonl SECONDS &   # beside `validate --json --output RUN.json`
    python3 lab/vmstat_during.py read RUN.json SAMPLES.jsonl

`read` prints, per epoch: its ratio (recommended over current), the dirty page cache when it
began (kB), and what it wrote out (pgpgout, kB), its major faults, the pages compaction
scanned and the iowait share of the CPUs. SAMPLES may be gzipped (results/ keeps them so,
as NAME.jsonl.gz; the plain name finds them). Standard library only."""

from __future__ import annotations

import gzip
import json
import os
import sys
import time

KEYS = ("nr_dirty", "nr_writeback", "pgpgout", "pgpgin", "pgmajfault", "pgfault",
        "compact_migrate_scanned", "compact_daemon_migrate_scanned", "pgmigrate_success",
        "thp_collapse_alloc", "pgsteal_kswapd")


def sample(out: str, seconds: float) -> None:
    end = time.time() + seconds
    with open(out, "w") as f:
        while time.time() < end:
            v = {k: int(n) for k, n in (ln.split() for ln in open("/proc/vmstat")) if k in KEYS}
            for ln in open("/proc/meminfo"):
                if ln.startswith(("Dirty:", "Writeback:", "Cached:")):
                    v[ln.split(":")[0]] = int(ln.split()[1])
            v["cpu"] = [int(x) for x in open("/proc/stat").readline().split()[1:]]
            v["t"] = time.time()
            f.write(json.dumps(v) + "\n")
            f.flush()
            time.sleep(1)


def samples_of(path: str) -> list[dict]:
    """The samples of `path`, or of `path`.gz where only that is kept (results/ keeps them
    gzipped)."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return [json.loads(ln) for ln in f]


def read(run: str, samples: str) -> None:
    r = json.load(open(run))
    vm = samples_of(samples)
    at = lambda t: min(vm, key=lambda v: abs(v["t"] - t))  # noqa: E731
    length = r["meta"]["run_s"] + r["meta"]["warm_s"]
    by: dict[int, list] = {}
    for s in r["samples"]:
        by.setdefault(s["epoch"], []).append(s)
    cols = ("pgpgout", "pgmajfault", "compact_migrate_scanned", "compact_daemon_migrate_scanned")
    print("| epoch | ratio | Dirty at its start (kB) | " + " | ".join(cols) + " | iowait |")
    print("|---:|---:|---:|" + "---:|" * (len(cols) + 1))
    for ep in sorted(by):
        ss = by[ep]
        tps = {s["variant"]: s["tps"] for s in ss}
        if not {"current", "recommended"} <= set(tps):
            continue
        t0 = min(s["started"] for s in ss)
        a, b = at(t0), at(t0 + length)
        cpu = [y - x for x, y in zip(a["cpu"], b["cpu"])]
        print(f"| {ep + 1} | {tps['recommended'] / tps['current']:.3f} | {a['Dirty']:,} | "
              + " | ".join(f"{b[k] - a[k]:,}" for k in cols)
              + f" | {100 * cpu[4] / max(1, sum(cpu)):.1f}% |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["sample"]:
        sample(sys.argv[2], float(sys.argv[3]))
    else:
        read(sys.argv[2], sys.argv[3])
