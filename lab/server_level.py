"""Does a side-by-side server's level go with its data directory, and with which part of it?

    sudo .venv/bin/python lab/server_level.py run OUT.jsonl [--mixed] [--thp] [PLAN [EPOCHS]]
    python3 lab/server_level.py read OUT.jsonl[.gz]
    (PLAN defaults to base,none,evict,none,recopy,none,evict,none,recopy,none,evict,recopy;
    EPOCHS to 4)

Two scratch servers as validate's default makes them: scale 6 loaded into one (huge_pages =
off, 128MB of buffers, validate's run settings), stopped fast and copied with cp -a. Each
epoch stops both at once (fast), starts and prewarms them one after the other, the order
turning every epoch, and runs pgbench TPC-B on both together as validate does (-M prepared
-c 6 -j 2 -T 18 -P 1, the first 3 s not counted), each server and its client pinned to half
the CPUs (one CPU on a 2-CPU machine) and trading every 3.75 s on validate's own grid (the
clients start X's first, where validate turns their order too), the first placement turning
every epoch. Both run the same settings (huge_pages = off: 4 KiB pages, as validate's
current variant runs where it starts after the pool's pages are taken), so the log ratio X
over Y of an epoch is the directories' level against each other, plus noise. An epoch
records the CPU trades that did not take.

--mixed: as validate's default compares, one server runs on huge pages (huge_pages = on, the
pool raised by EXTRA_PAGES for the run and put back) and the other on 4 KiB pages, turning
by on_huge() and the huge-page server started first, as validate starts it; an epoch's
ratio is then the level plus or minus the huge pages' effect, and each generation gives
both. --thp: THP's `enabled` turns too (thp_phase(), set before the starts and put back at
the end), as validate's THP phases turn it.

The epochs come in generations (PLAN). Before each generation its action is done to both
directories, stopped:
- none: nothing;
- evict: every file's page cache dropped (sync, then posix_fadvise DONTNEED), so that the
  next prewarm reads the tables into new page-cache pages and the WAL is written into new
  ones;
- recopy: each directory copied anew with cp -a and the old one removed: new files, new
  blocks on disk, new page cache, a new port and socket; the same rows, WAL and state;
- swap: the two directories trade places in the harness: X's role (its client started
  first, its place in the CPU trades) goes to the other one. A level carried by anything of
  a directory's (page cache, files, rows) turns its sign in X over Y at a swap; one carried
  by the harness's roles stays;
- auto: a swap where the generation before held a level of AUTO_PCT or more either way,
  else nothing (the record names what was done): swaps spent only where a level is there
  to turn.
A level carried by the directory's page cache moves at evict; by its files, at recopy; by
its contents, at neither; by the start order or the CPUs, it is not in these ratios at all
(both turn every epoch).

Without --mixed and --thp it touches no pool and no THP knob; two scratch clusters, removed
at the end. `read` prints each generation's mean log ratio (%) with its standard error and
the change from the generation before (with --mixed, the huge pages' effect too), an F test
of whether the generations' levels differ by more than the epochs' noise, the steps between
generations by the action before them (lab/level_steps.py), and (without --mixed) the start
order's effect within generations."""

from __future__ import annotations

import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from f_dist import f_sf
from level_steps import steps, swaps

WARM_S, RUN_S, SWAP_S = 3, 18, 3.75
PLAN = "base,none,evict,none,recopy,none,evict,none,recopy,none,evict,recopy"


def cached_mb(datadir: str) -> float:
    """The directory's files' bytes in the page cache (fincore(1), util-linux)."""
    files = [os.path.join(d, f) for d, _, fs in os.walk(datadir) for f in fs]
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES", *files],
                       capture_output=True, text=True)
    return sum(int(x) for x in r.stdout.split() if x.isdigit()) / 2**20


def wal_files(datadir: str) -> int:
    """The WAL segment files in the directory's pg_wal (24 hex digits a name), after the
    epoch: the segments its shutdown checkpoint kept for reuse are among them."""
    return sum(1 for f in os.listdir(os.path.join(datadir, "pg_wal")) if len(f) == 24)


def evict(datadir: str) -> None:
    os.sync()
    for d, _, fs in os.walk(datadir):
        for f in fs:
            try:
                fd = os.open(os.path.join(d, f), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def tps_of(stderr: str) -> tuple[float, list[float]]:
    """The measured seconds' mean TPS and every second's (pgbench -P 1 progress lines)."""
    from hpadvise.benchmarks.pgbench import parse_progress
    per = [(t, v) for t, v, _ in parse_progress(stderr)]
    kept = [v for t, v in per if t > WARM_S]
    return (statistics.fmean(kept) if kept else 0.0), [v for _, v in per]


def run_pair(sr, groups: list, cs: list, k0: int) -> tuple[list, int]:
    """pgbench TPC-B on both servers at once as validate runs it (benchmarks/pgbench.py's
    command: -M prepared -c 6 -j 2 on 2 CPUs -T 18 -P 1), server i and its client on CPU group
    (i + k0) mod 2, trading on validate's grid: each server's (mean TPS, TPS a second), and
    how many trades did not take."""
    from hpadvise.benchmarks.cpus import pin_trees, start_pinned, trade, turn
    from hpadvise.benchmarks.pgbench import Pgbench
    pids = [c.pid for c in cs]
    # the postmasters first: the backends the clients connect to inherit it
    pin_trees(sr, [(pids[i], groups[(i + k0) % 2]) for i in range(2)])
    procs = []
    for i, c in enumerate(cs):
        d = Pgbench(f"{c.bindir}/pgbench", c.tmp, c.port, "postgres", "postgres", c.run_as)
        procs.append(start_pinned(lambda: d.start("tpcb", 6, RUN_S - WARM_S, None, WARM_S),
                                  groups[(i + k0) % 2]))
    t0, done = time.time(), threading.Event()
    missed: list = []  # trades that did not take, or failed

    def trader() -> None:
        k = 0
        while not done.wait(0.05):
            if time.time() - t0 >= RUN_S:  # none at the measured part's end, as validate
                continue
            now = turn(time.time() - t0, WARM_S, SWAP_S)
            if now != k:
                k = now
                try:
                    took = trade(sr, groups, pids, [p.pid for p in procs], k0 + k)
                except OSError as e:
                    took = [repr(e)]
                missed.extend(t for t in took if t is not True)
    th = threading.Thread(target=trader, daemon=True)
    th.start()
    res = [p.communicate() for p in procs]
    done.set()
    th.join()
    for p, (_, err) in zip(procs, res):
        if p.returncode != 0:
            raise RuntimeError(f"pgbench failed: {err.strip()[-500:]}")
    return [tps_of(err) for _, err in res], len(missed)


POOL = "/proc/sys/vm/nr_hugepages"
# 2 MiB pages: a 128MB server's shared memory reserves 71-73 of them (validate's pool for it:
# 73), of which its runs here faulted 53-58
EXTRA_PAGES = 80


AUTO_PCT = 2.0


def fit(rs: list[dict]) -> tuple[float, float | None, list[float], list[int], int]:
    """A generation's fit from its epochs' records: (level X over Y in %, the huge-page effect
    or None, the residuals in the epochs' order, epochs at each placement, parameters fitted).
    With --mixed an epoch's log ratio X over Y is level + effect where X ran on huge pages
    and level - effect where Y did: the level is the mean over the two placements' means, the
    effect half their difference. Without it the level is the epochs' mean."""
    ls = [100 * math.log(r["tps"][0] / r["tps"][1]) for r in rs]
    if rs[0].get("huge") is None:
        m = statistics.fmean(ls)
        return m, None, [x - m for x in ls], [len(ls)], 1
    by = {h: [x for r, x in zip(rs, ls) if r["huge"] == h] for h in (0, 1)}
    mean = {h: statistics.fmean(v) for h, v in by.items()}
    res = [x - mean[r["huge"]] for r, x in zip(rs, ls)]
    return (mean[0] + mean[1]) / 2, (mean[0] - mean[1]) / 2, res, [len(by[0]), len(by[1])], 2


def on_huge(epoch: int) -> int:
    """--mixed: which server runs on huge pages in an epoch: X, Y, Y, X, ...; with the first
    CPU turning every epoch, four epochs balance the two."""
    return 0 if epoch % 4 in (0, 3) else 1


THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_phase(epoch: int) -> str:
    """--thp: THP's enabled in an epoch: never, never, always, always, ...: with on_huge()
    and the first CPU, four epochs balance each pair of the three. Not their interaction:
    the huge-page server's first CPU goes with the phase, which the trades within each run
    (an equal time on each CPU) leave little to act on."""
    return "never" if epoch % 4 < 2 else "always"


def run(out: str, plan: list[str], n: int, mixed: bool, thp: bool) -> None:
    from hpadvise.api.face import SysRoot
    from hpadvise.benchmarks.cpus import cpu_groups
    from hpadvise.benchmarks.pgbench import Pgbench
    from hpadvise.plugins.postgres.validate.bench import (LOAD_SETTINGS, RUN_SETTINGS, PgTarget,
                                                          ScratchCluster)

    def target(c):
        t = PgTarget.__new__(PgTarget)
        t.c, t.dbname, t.dbs, t.prewarm_note = c, "postgres", ["postgres"], ""
        return t

    sr, groups = SysRoot("/"), cpu_groups(2)
    pool0 = int(open(POOL).read()) if mixed else 0
    thp0 = open(THP).read().split("[")[1].split("]")[0] if thp else ""
    every: list = []  # every cluster made, destroyed at the end (a second destroy is harmless)
    try:
        if mixed:
            with open(POOL, "w") as p:
                p.write(str(pool0 + EXTRA_PAGES))
        x = ScratchCluster({"shared_buffers": "128MB", "huge_pages": "off",
                            "max_connections": "50", **LOAD_SETTINGS})
        cs = [x]
        every.append(x)
        x.start()
        Pgbench(f"{x.bindir}/pgbench", x.tmp, x.port, x.user, "postgres", x.run_as).init(6)
        x.configure(RUN_SETTINGS)
        x.psql("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        x.stop("fast")
        cs.append(ScratchCluster.copy_of(x))
        every.append(cs[1])
        epoch, line = 0, [0, 1]  # the directories' lines: 0 the loaded one, 1 its copy
        with open(out, "a") as f:
            last = 0.0  # the level of the generation before, for auto
            for gen, action in enumerate(plan):
                if action == "auto":
                    action = "swap" if abs(last) >= AUTO_PCT else "none"
                if action == "evict":
                    for c in cs:
                        evict(c.datadir)
                elif action == "recopy":
                    for i, c in enumerate(cs):
                        cs[i] = ScratchCluster.copy_of(c)
                        every.append(cs[i])
                        c.destroy()
                elif action == "swap":  # each directory takes the other's place in the harness
                    cs.reverse()
                    line.reverse()
                done: list[dict] = []  # this generation's records, for its level
                for _ in range(n):
                    cached = [round(cached_mb(c.datadir), 1) for c in cs]
                    order = [0, 1] if epoch % 2 == 0 else [1, 0]
                    huge = None
                    if mixed:  # the huge-page server starts first, as in validate
                        huge = on_huge(epoch)
                        order = [huge, 1 - huge]
                        for i, c in enumerate(cs):
                            c.configure({"huge_pages": "on" if i == huge else "off"})
                    if thp:  # before the starts: THP applies to memory faulted after it
                        with open(THP, "w") as p:
                            p.write(thp_phase(epoch))
                    for i in order:
                        cs[i].start()
                        target(cs[i]).prewarm()
                    mem = sr.read_kv("/proc/meminfo") or {}
                    pool_used = int(mem["HugePages_Total"]) - int(mem["HugePages_Free"])
                    k0 = epoch % 2
                    tps, missed = run_pair(sr, groups, cs, k0)
                    with ThreadPoolExecutor(2) as ex:
                        list(ex.map(lambda c: c.stop("fast"), cs))
                    rec = {"gen": gen, "action": action, "epoch": epoch, "first": order[0],
                           "trades_missed": missed,
                           "huge": huge, "pool_used": pool_used,
                           "thp": thp_phase(epoch) if thp else None,
                           "tps": [t for t, _ in tps],
                           "per_s": [p for _, p in tps], "cached_mb": cached,
                           "dirs": [c.datadir for c in cs], "line": list(line),
                           "wal_files": [wal_files(c.datadir) for c in cs]}
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    done.append(rec)
                    ratio = 100 * math.log(tps[0][0] / tps[1][0])
                    print(f"gen {gen} {action:6} epoch {epoch:2}: X {tps[0][0]:8,.0f} Y "
                          f"{tps[1][0]:8,.0f} TPS, X/Y {ratio:+.2f}%"
                          f", cached {cached[0]:.0f}/{cached[1]:.0f} MB"
                          + (f", huge pages on {'XY'[huge]} ({pool_used} in use)" if mixed else "")
                          + (f", THP {thp_phase(epoch)}" if thp else ""),
                          flush=True)
                    epoch += 1
                last = fit(done)[0]
    finally:
        try:  # the servers first, so that the pool shrinks with none of its pages in use
            for c in every:
                c.destroy()
        finally:  # and the host's knobs back even where a destroy failed, read back after
            if mixed:
                with open(POOL, "w") as p:
                    p.write(str(pool0))
                if int(open(POOL).read()) != pool0:
                    print(f"server_level: the pool did not go back to {pool0} pages",
                          file=sys.stderr)
            if thp:
                with open(THP, "w") as p:
                    p.write(thp0)
                if f"[{thp0}]" not in open(THP).read():
                    print(f"server_level: THP enabled did not go back to {thp0}",
                          file=sys.stderr)


def read(path: str) -> None:
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        recs = [json.loads(ln) for ln in f if ln.strip()]
    gens: dict[int, list[dict]] = {}
    for r in recs:
        gens.setdefault(r["gen"], []).append(r)
    mixed = recs[0].get("huge") is not None
    lines = any(r.get("line") for r in recs)  # swaps: the directories' own lines shown too
    print("| generation | before it | epochs | X over Y | se | change |"
          + (" huge over 4 KiB | se |" if mixed else "")
          + (" loaded over copy |" if lines else "") + " cached MB X/Y at its start |")
    print("|---:|---|---:|---:|---:|---:|" + ("---:|---:|" if mixed else "")
          + ("---:|" if lines else "") + "---|")
    prev, within, levels, fitted = None, [], [], 0
    for g, rs in sorted(gens.items()):
        m, eff, res, n_at, k = fit(rs)
        if mixed:
            sd = math.sqrt(sum(x * x for x in res) / max(1, len(res) - 2))
            se = sd * math.sqrt(1 / n_at[0] + 1 / n_at[1]) / 2
            extra = f" {eff:+.2f}% | {se:.2f} |"
            share = (1 / n_at[0] + 1 / n_at[1]) / 4  # the level's variance over one epoch's
        else:
            se = statistics.stdev(res) / math.sqrt(len(res)) if len(res) > 1 else float("nan")
            extra = ""
            share = 1 / len(res)
        fitted += k
        levels.append((m, share))
        ch = f"{m - prev:+.2f}" if prev is not None else ""
        if lines:  # X is the loaded directory's line, or its copy's
            extra += f" {m if rs[0]['line'][0] == 0 else -m:+.2f}% |"
        print(f"| {g} | {rs[0]['action']} | {len(res)} | {m:+.2f}% | {se:.2f} | {ch} |{extra} "
              f"{rs[0]['cached_mb'][0]:.0f}/{rs[0]['cached_mb'][1]:.0f} |")
        prev = m
        within += [(1 if r["first"] == 0 else -1, x) for r, x in zip(rs, res)]
    if len(within) <= fitted:
        print("\ntoo few epochs in each generation to estimate their noise")
        return
    sd = math.sqrt(sum(x * x for _, x in within) / (len(within) - fitted))
    print(f"\nthe epochs' sd about their generation's fit: {sd:.2f}% ({len(within)} epochs)")
    # do the generations' levels differ by more than the epochs' noise lets them? Q over
    # the pooled noise, whose sd is itself estimated: Q / (generations - 1) is F on
    # (generations - 1) and the residuals' degrees of freedom
    w = [1 / (sd * sd * c) for _, c in levels]
    mean = sum(wi * m for wi, (m, _) in zip(w, levels)) / sum(w)
    q = sum(wi * (m - mean) ** 2 for wi, (m, _) in zip(w, levels))
    between = "one generation: nothing to test between" if len(levels) < 2 else (
        f"between generations Q = {q:.1f} on {len(levels) - 1} df, F test p = "
        f"{f_sf(q / (len(levels) - 1), len(levels) - 1, len(within) - fitted):.3f}")
    print(f"the level over all generations {mean:+.2f}% (se {math.sqrt(1 / sum(w)):.2f}); "
          + between)
    actions = [gens[g][0]["action"] for g in sorted(gens)]
    steps(levels, actions, sd, len(within) - fitted)
    if "swap" in actions:
        swaps([m for m, _ in levels], actions,
              [gens[g][0]["line"][0] for g in sorted(gens)])
    if not mixed:  # in --mixed the start order goes with the placement, which the fit takes
        order = statistics.fmean(s * d for s, d in within)
        print(f"X started first and on the first CPU, against Y so (half the difference): "
              f"{order:+.2f}%")
    tps = [t for r in recs for t in r["tps"]]
    print(f"TPS a server: median {statistics.median(tps):,.0f}, "
          f"range {min(tps):,.0f} .. {max(tps):,.0f}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a not in ("--mixed", "--thp")]
    if len(args) >= 2 and args[0] == "run":
        run(args[1], (args[2] if len(args) > 2 else PLAN).split(","),
            int(args[3]) if len(args) > 3 else 4, "--mixed" in sys.argv, "--thp" in sys.argv)
    elif len(args) == 2 and args[0] == "read":
        read(args[1])
    else:
        sys.exit(__doc__)
