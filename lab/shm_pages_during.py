#!/usr/bin/env python3
"""Where each PostgreSQL server's shared memory sits, beside a validate run, and whether the
server whose 4 KiB shared memory is spread wider runs slower. lab/memory_placement.py found
that in this VM two buffers of one size, allocated alike, walk up to a third apart by which
guest-physical pages they got (the slower one spread over more 2 MiB frames), the same on
both CPUs. This asks whether validate's servers meet that.

    python3 lab/shm_pages_during.py sample OUT.jsonl SECONDS &   # beside `validate --json --output RUN.json`
    python3 lab/shm_pages_during.py read RUN.json OUT.jsonl

`sample` reads, every 5 s, each postmaster's largest shared mapping (its buffers) and, for
each of its children (the backends map the same pages), /proc/PID/pagemap over that range:
the pages present in any of them, the 2 MiB guest-physical frames they sit in (which ones,
for 4 KiB mappings), their mean guest-physical GiB, and whether the mapping is on huge
pages (hugetlb). The system's own servers are left out (their data directories under
/var/lib). Root. Standard library only. OUT may be kept gzipped (results/ keeps it so, as
NAME.jsonl.gz; the plain name finds it).

`read` prints, per epoch, the ratio (recommended over current), which server ran current
(0: the loaded original, 1: its copy) and its shared memory's frames (from the epoch's
fullest sample, where at least 60% of the mapping's pages were present), and the
correlation of the epoch's log ratio with those frames, within each placement (a server's
own level set apart); and how much of current's frames one epoch shares with the next and
with the one after (a draw that alternates between two sets of pages would follow the
placement, which turns every epoch); where the samples hold them, how much of each server's
processes' own memory (private, anonymous: heaps) the next epoch gives back to the same
server and how much to the other."""

from __future__ import annotations

import json
import math
import os
import statistics
import struct
import sys
import time

from vmstat_during import samples_of

PAGE = 4096


def postmasters() -> list[tuple[int, str]]:
    """(pid, data directory) of every postmaster but the system's own."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            parent = open(f"/proc/{ppid}/comm").read().strip()
        except (OSError, ValueError, IndexError):
            continue
        if not argv[0].endswith(b"postgres") or parent in ("postgres", "postmaster"):
            continue
        d = next((argv[i + 1].decode() for i, a in enumerate(argv[:-1]) if a == b"-D"), "")
        if d and not d.startswith("/var/lib/"):
            out.append((int(pid), d))
    return out


def buffers(pid: int) -> tuple[int, int, bool] | None:
    """The largest shared mapping of a process: (start, end, on hugetlb)."""
    best = None
    try:
        lines = open(f"/proc/{pid}/maps").readlines()
    except OSError:  # the server stopped between the listing and this read
        return None
    for ln in lines:
        f = ln.split()
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        if f[1][3] != "s":
            continue
        if best is None or hi - lo > best[1] - best[0]:
            best = (lo, hi, "anon_hugepage" in ln or "hugepages" in ln)
    return best


def children(pid: int) -> list[int]:
    try:
        return [int(c) for t in os.listdir(f"/proc/{pid}/task")
                for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
    except OSError:
        return []


def present(f, lo: int, hi: int) -> list[tuple[int, int]]:
    """(page index from lo, guest-physical frame) of each present page of [lo, hi), from an
    open /proc/PID/pagemap (an entry a page: bit 63 present, bits 0-54 the frame)."""
    f.seek(lo // PAGE * 8)
    raw = f.read((hi - lo) // PAGE * 8)
    return [(i, e & ((1 << 55) - 1)) for i, (e,) in enumerate(struct.iter_unpack("<Q", raw))
            if e >> 63]


def frames(pids: list[int], lo: int, hi: int) -> dict[int, int]:
    """page index -> guest-physical frame, over every process that has it present."""
    got: dict[int, int] = {}
    for p in pids:
        try:
            with open(f"/proc/{p}/pagemap", "rb") as f:
                for i, x in present(f, lo, hi):
                    got.setdefault(i, x)
        except OSError:
            continue
    return got


def private(pids: list[int]) -> list[int]:
    """The guest-physical frames (4 KiB) of the processes' private anonymous memory (their
    heaps and other private mappings without a file), present pages only."""
    out = []
    for p in pids:
        try:
            spans = [ln.split() for ln in open(f"/proc/{p}/maps")]
            with open(f"/proc/{p}/pagemap", "rb") as f:
                for sp in spans:
                    if sp[1][3] != "p" or (len(sp) > 5 and sp[5] != "[heap]"):
                        continue
                    lo, hi = (int(x, 16) for x in sp[0].split("-"))
                    out += [x for _, x in present(f, lo, hi)]
        except OSError:  # the process ended meanwhile
            continue
    return out


def sample(out: str, seconds: float) -> None:
    end = time.time() + seconds
    with open(out, "w") as f:
        while time.time() < end:
            t = time.time()
            for pid, datadir in postmasters():
                m = buffers(pid)
                if m is None:
                    continue
                procs = [pid, *children(pid)]
                got = frames(procs, m[0], m[1])
                pfn = list(got.values())
                own = private(procs)
                f.write(json.dumps({
                    "t": round(t, 2), "pid": pid, "datadir": datadir, "huge": m[2],
                    "mib": (m[1] - m[0]) >> 20, "present": len(pfn),
                    "frames_2m": len({x >> 9 for x in pfn}),
                    # which frames: is the next start's draw the same pages, or another set?
                    "which": sorted({x >> 9 for x in pfn}) if not m[2] else [],
                    "gib": round(statistics.mean(pfn) * PAGE / 2**30, 2) if pfn else None,
                    # the server's processes' own memory: does it follow the server?
                    "private_pages": len(own), "private_which": sorted({x >> 9 for x in own}),
                }) + "\n")
            f.flush()
            time.sleep(max(0.0, 5 - (time.time() - t)))


def follows(rows: list[dict], windows: list[tuple[float, float]], server: dict) -> None:
    """Does a server's processes' own memory come back to the same server at its next start,
    or go to the other? The share of 2 MiB frames two epochs' draws have in common, for the
    same server and across the two."""
    draws = []  # per epoch: data directory -> the frames of its fullest sample
    for t0, length in windows:
        best: dict[str, dict] = {}
        for x in rows:
            if t0 <= x["t"] <= t0 + length and "private_which" in x and (
                    x["private_pages"] > best.get(x["datadir"], {"private_pages": -1})[
                        "private_pages"]):
                best[x["datadir"]] = x
        draws.append({d: set(x["private_which"]) for d, x in best.items()})
    same, cross = [], []
    share = lambda a, b: len(a & b) / len(a | b)  # noqa: E731
    for a, b in zip(draws, draws[1:]):
        if len(a) == 2 and len(b) == 2:
            d0, d1 = sorted(a)
            same += [share(a[d0], b[d0]), share(a[d1], b[d1])]
            cross += [share(a[d0], b[d1]), share(a[d1], b[d0])]
    if same:
        sizes = [len(v) for d in draws for v in d.values()]
        print(f"the servers' own memory (postmaster and children, private and anonymous): "
              f"{min(sizes)}-{max(sizes)} 2 MiB frames a server; one epoch's against the "
              f"next's, the same server {100 * statistics.mean(same):.0f}% the same, the "
              f"other server {100 * statistics.mean(cross):.0f}% ({len(same) // 2} pairs of "
              f"epochs; servers {', '.join(f'{v}: {k}' for k, v in sorted(server.items()))})")


def read(run: str, path: str) -> None:
    r = json.load(open(run))
    rows = samples_of(path)
    dirs = sorted({x["datadir"] for x in rows}, key=lambda d: min(x["t"] for x in rows
                                                                 if x["datadir"] == d))
    length = r["meta"]["run_s"] + r["meta"]["warm_s"]
    by: dict[int, list] = {}
    for s in r["samples"]:
        by.setdefault(s["epoch"], []).append(s)
    print("| epoch | ratio | current on server | its shared memory: 2 MiB frames, pages present, "
          "GiB | the other's (on huge pages?) | postmasters' PIDs |")
    print("|---:|---:|---:|---|---|---|")
    pts, currents = [], []
    for ep in sorted(by):
        ss = {s["variant"]: s for s in by[ep]}
        if not {"current", "recommended"} <= set(ss):
            continue
        t0 = min(s["started"] for s in by[ep])
        mid = [x for x in rows if t0 <= x["t"] <= t0 + length]
        if not mid:
            continue
        last: dict[int, dict] = {}  # each postmaster's fullest sample in the epoch
        for x in mid:
            if x["present"] >= last.get(x["pid"], {"present": -1})["present"]:
                last[x["pid"]] = x
        # a mapping read while its server is still filling it says little of its spread
        small = [x for x in last.values() if not x["huge"] and x["present"] >= 0.6 * x["mib"] * 256]
        big = [x for x in last.values() if x["huge"]]
        ratio = ss["recommended"]["tps"] / ss["current"]["tps"]
        if len(small) != 1:
            continue
        cur = small[0]
        currents.append(cur)
        pts.append((ss["current"]["server"], math.log(ratio), cur["frames_2m"]))
        other = big[0] if big else None
        print(f"| {ep + 1} | {ratio:.3f} | {ss['current']['server']} | {cur['frames_2m']}, "
              f"{cur['present']}, {cur['gib']} | "
              + (f"{other['frames_2m']}, {other['present']}, {other['gib']}" if other else "-")
              + f" | {', '.join(str(p) for p in sorted(last))} |")
    print(f"\nservers' data directories in order of first sight: {len(dirs)}")
    sets = [set(c.get("which", ())) for c in currents]
    if len(sets) > 2 and all(sets):
        for lag in (1, 2):
            same = [len(a & b) / len(a | b) for a, b in zip(sets, sets[lag:])]
            print(f"current's 2 MiB frames, one epoch against the one {lag} later: "
                  f"{100 * statistics.mean(same):.0f}% the same (median of "
                  f"{len(same)}: {100 * statistics.median(same):.0f}%)")
    windows = [(min(x["started"] for x in by[ep]), length) for ep in sorted(by)]
    follows(rows, windows, {c["datadir"]: srv for c, (srv, _, _) in zip(currents, pts)})
    for srv in sorted({p[0] for p in pts}):
        x = [p[2] for p in pts if p[0] == srv]
        y = [p[1] for p in pts if p[0] == srv]
        if len(set(x)) > 1 and len(x) > 2:
            print(f"current on server {srv}: {len(x)} epochs, its frames {min(x)}-{max(x)}; "
                  f"log ratio against them r = {statistics.correlation(x, y):+.2f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["sample"]:
        sample(sys.argv[2], float(sys.argv[3]))
    elif sys.argv[1:2] == ["read"]:
        read(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
