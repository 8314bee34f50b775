"""How much of a side-by-side TPC-B run is spent queueing on pgbench_branches' rows, and what
that does to the run's second-by-second steadiness: one scratch server (huge_pages = off,
validate's run settings), its server and clients on one CPU as a simultaneous run places each
server, pgbench -M prepared -P 1 for RUN_S seconds per case, pg_stat_activity sampled every
0.1 s meanwhile from the other CPU.

    sudo .venv/bin/python lab/tpcb_contention.py [BUFFERS [RUN_S [SCALE/CLIENTS,...]]]
    (defaults: 512MB 40 6/8,6/6,6/4,24/8,6/8,24/8)

pgbench's documentation ("Good Practices"): there are only `-s` rows in pgbench_branches and
every TPC-B transaction updates one of them, so more clients than the scale mostly measure
update contention. validate's default at 128MB of buffers is scale 6 and 8 clients a server.

Touches no pool and no THP knob; one scratch cluster, removed at the end. Prints one line per
case: TPS, the sd of the per-second TPS over its mean (after 5 s), and the share of sampled
active backends that waited on a lock (wait_event_type Lock) or ran.
"""

import os
import re
import statistics
import subprocess
import sys
import threading

from hpadvise.plugins.postgres.validate.bench import LOAD_SETTINGS, RUN_SETTINGS, ScratchCluster

buffers = sys.argv[1] if len(sys.argv) > 1 else "512MB"
run_s = int(sys.argv[2]) if len(sys.argv) > 2 else 40
CASES = [tuple(map(int, c.split("/"))) for c in
         (sys.argv[3] if len(sys.argv) > 3 else "6/8,6/6,6/4,24/8,6/8,24/8").split(",")]
CPU = {0}

c = ScratchCluster({"shared_buffers": buffers, "huge_pages": "off", "max_connections": "50",
                   **LOAD_SETTINGS})
loaded: set[int] = set()
try:
    c.start()
    c.configure(RUN_SETTINGS)
    c.stop("fast")
    c.start()
    for scale, clients in CASES:
        db = f"s{scale}"
        if scale not in loaded:
            c.psql(f"CREATE DATABASE {db}")
            subprocess.run([f"{c.bindir}/pgbench", "-h", c.tmp, "-p", str(c.port), "-U",
                            "postgres", "-i", "-q", "-s", str(scale), db], check=True,
                           capture_output=True, cwd="/", **c.run_as)
            loaded.add(scale)
        c.psql("CHECKPOINT")
        pm = int(open(f"{c.datadir}/postmaster.pid").readline())
        tids = os.listdir(f"/proc/{pm}/task")
        for t in tids:
            os.sched_setaffinity(int(t), CPU)  # backends forked later inherit it
        for line in subprocess.run(["ps", "-o", "pid=", "--ppid", str(pm)], capture_output=True,
                                   text=True).stdout.split():
            os.sched_setaffinity(int(line), CPU)
        waits = {"Lock": 0, "run": 0, "other": 0}
        stop = threading.Event()

        def sample():
            q = ("SELECT coalesce(wait_event_type, 'run') FROM pg_stat_activity WHERE state = "
                 f"'active' AND datname = '{db}' AND pid <> pg_backend_pid()")
            while not stop.wait(0.1):
                try:
                    out = c.psql(q)
                except Exception:
                    continue
                for w in out.split():
                    waits[w if w in waits else "other"] += 1
        th = threading.Thread(target=sample)
        os.sched_setaffinity(0, {1})  # the sampler and its psql on the other CPU
        th.start()
        r = subprocess.run(["taskset", "-c", "0", f"{c.bindir}/pgbench", "-h", c.tmp, "-p",
                            str(c.port), "-U", "postgres", "-M", "prepared", "-c",
                            str(clients), "-j", str(min(clients, 2)), "-P", "1", "-T",
                            str(run_s), db],
                           capture_output=True, text=True, cwd="/", **c.run_as)
        stop.set()
        th.join()
        per_s = [float(m.group(1)) for m in re.finditer(r"progress: [\d.]+ s, ([\d.]+) tps",
                                                         r.stderr)][5:]
        tps = statistics.mean(per_s)
        cv = statistics.stdev(per_s) / tps
        n = sum(waits.values()) or 1
        share = {k: 100 * v / n for k, v in waits.items()}
        print(f"scale {scale:3d}, {clients} clients: {tps:7,.0f} TPS, per-second sd/mean "
              f"{100 * cv:4.1f}%, active backends waiting on a lock {share['Lock']:4.1f}%, "
              f"running {share['run']:4.1f}%, other waits {share['other']:4.1f}% "
              f"({n} samples)", flush=True)
finally:
    c.destroy()
