"""Does autovacuum fall inside validate's measured runs, and what does it cost the server it
runs in? One scratch server as validate makes it (huge_pages = off, validate's run
settings, PostgreSQL's autovacuum defaults), scale SCALE of pgbench data, the server and
CLIENTS TPC-B clients on CPU 0 as a simultaneous run places a server; pg_stat_activity is
sampled every 0.2 s from CPU 1 for autovacuum workers while pgbench -P 1 runs RUN_S seconds.

    sudo .venv/bin/python lab/tpcb_autovacuum.py [BUFFERS [SCALE [CLIENTS [RUN_S [AUTOVACUUM]]]]]
    (defaults: 128MB 6 8 120 on)

Touches no pool and no THP knob; one scratch cluster, removed at the end. Prints each second
with a worker at work (and its table), then the mean TPS of the seconds with and without one.
"""

import os
import re
import statistics
import subprocess
import sys
import threading
import time

from hpadvise.plugins.postgres.validate.bench import LOAD_SETTINGS, RUN_SETTINGS, ScratchCluster

buffers = sys.argv[1] if len(sys.argv) > 1 else "128MB"
scale = int(sys.argv[2]) if len(sys.argv) > 2 else 6
clients = int(sys.argv[3]) if len(sys.argv) > 3 else 8
run_s = int(sys.argv[4]) if len(sys.argv) > 4 else 120
autovacuum = sys.argv[5] if len(sys.argv) > 5 else "on"

c = ScratchCluster({"shared_buffers": buffers, "huge_pages": "off", "max_connections": "50",
                   **LOAD_SETTINGS})
try:
    c.start()
    subprocess.run([f"{c.bindir}/pgbench", "-h", c.tmp, "-p", str(c.port), "-U", "postgres",
                    "-i", "-q", "-s", str(scale), "postgres"], check=True, capture_output=True,
                   cwd="/", **c.run_as)
    c.configure({**RUN_SETTINGS, "autovacuum": autovacuum})
    c.stop("fast")
    c.start()
    c.psql("CHECKPOINT")
    pm = int(open(f"{c.datadir}/postmaster.pid").readline())
    for t in os.listdir(f"/proc/{pm}/task"):
        os.sched_setaffinity(int(t), {0})  # its children (backends, workers) inherit it
    for p in subprocess.run(["ps", "-o", "pid=", "--ppid", str(pm)], capture_output=True,
                            text=True).stdout.split():
        os.sched_setaffinity(int(p), {0})
    os.sched_setaffinity(0, {1})  # this process, its sampler and psql on the other CPU
    seen: list[tuple[float, str]] = []
    stop = threading.Event()

    def sample():
        q = ("SELECT coalesce(string_agg(query, ';'), '') FROM pg_stat_activity "
             "WHERE backend_type = 'autovacuum worker' AND query <> ''")
        while not stop.wait(0.2):
            try:
                seen.append((time.time(), c.psql(q)))
            except Exception:
                pass
    th = threading.Thread(target=sample)
    th.start()
    t0 = time.time()
    pg = subprocess.Popen(["taskset", "-c", "0", f"{c.bindir}/pgbench", "-h", c.tmp, "-p",
                           str(c.port), "-U", "postgres", "-M", "prepared", "-c", str(clients),
                           "-j", "2", "-P", "1", "-T", str(run_s), "postgres"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/",
                          **c.run_as)
    _, err = pg.communicate()
    stop.set()
    th.join()
    per = {round(float(m.group(1))): float(m.group(2)) for m in
           re.finditer(r"progress: ([\d.]+) s, ([\d.]+) tps", err)}
    busy: dict[int, set] = {}
    for t, q in seen:
        if q:
            sec = int(t - t0) + 1
            busy.setdefault(sec, set()).update(
                re.sub(r"^autovacuum: ", "", x).strip() for x in q.split(";"))
    for sec in sorted(busy):
        if sec in per:
            print(f"  s {sec:4d}: {per[sec]:7,.0f} TPS  {', '.join(sorted(busy[sec]))}")
    with_v = [v for s, v in per.items() if s in busy and s > 5]
    without = [v for s, v in per.items() if s not in busy and s > 5]
    mean_v = statistics.mean(with_v) if with_v else 0
    print(f"autovacuum={autovacuum} scale {scale}, {clients} clients, {run_s} s: "
          f"{len(with_v)} s with a worker at work, mean {mean_v:,.0f} TPS; {len(without)} s "
          f"without, mean {statistics.mean(without):,.0f} TPS "
          f"(sd {statistics.stdev(without):,.0f})", flush=True)
finally:
    c.destroy()
