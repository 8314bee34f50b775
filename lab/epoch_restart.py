"""What an epoch's restart costs a scratch server, and where: after a TPC-B run of RUN_S seconds,
a stop (immediate: the start replays the run's WAL and ends with a checkpoint; fast: the
checkpoint comes at the stop), a start and a prewarm, timed apart, with the scratch servers'
run settings and `fsync` as given.

    sudo .venv/bin/python lab/epoch_restart.py [BUFFERS [SCALE [RUN_S [STOP/FSYNC,...]]]]
    (defaults: 8GB 409 60 immediate/on,fast/on,fast/off, twice)

Touches no pool and no THP knob (huge_pages = off); one scratch cluster, removed at the end.
Prints one line per setting: TPS, WAL written, start (recovery + checkpoint), prewarm.
"""

import re
import subprocess
import sys
import time

from hpadvise.benchmarks.pgbench import Pgbench
from hpadvise.plugins.postgres.validate.bench import (LOAD_SETTINGS, RUN_SETTINGS, PgTarget,
                                             ScratchCluster)

buffers = sys.argv[1] if len(sys.argv) > 1 else "8GB"
scale = int(sys.argv[2]) if len(sys.argv) > 2 else 409
run_s = int(sys.argv[3]) if len(sys.argv) > 3 else 60
CASES = [c.split("/") for c in (sys.argv[4] if len(sys.argv) > 4 else
         "immediate/on,fast/on,fast/off,immediate/on,fast/on,fast/off").split(",")]

c = ScratchCluster({"shared_buffers": buffers, "huge_pages": "off", "max_connections": "50",
                   **LOAD_SETTINGS})
try:
    c.start()
    d = Pgbench(f"{c.bindir}/pgbench", c.tmp, c.port, c.user, "postgres", c.run_as)
    t0 = time.time()
    d.init(scale, lambda step: None)
    print(f"loaded scale {scale} in {time.time() - t0:.0f} s", flush=True)
    c.configure(RUN_SETTINGS)
    t = PgTarget.__new__(PgTarget)
    t.c, t.dbname, t.dbs, t.prewarm_note = c, "postgres", ["postgres"], ""
    c.psql("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
    for mode, fsync in CASES:
        c.configure({"fsync": fsync})
        c.stop("immediate")
        c.start()
        t.prewarm()
        lsn0 = c.psql("SELECT pg_current_wal_lsn()")
        r = subprocess.run([f"{c.bindir}/pgbench", "-h", c.tmp, "-p", str(c.port), "-U",
                            "postgres", "-M", "prepared", "-c", "8", "-j", "2", "-T",
                            str(run_s), "postgres"], capture_output=True, text=True,
                           **c.run_as)
        tps = float(re.search(r"tps = ([\d.]+)", r.stdout).group(1))
        wal = int(c.psql(f"SELECT pg_current_wal_lsn() - '{lsn0}'::pg_lsn"))
        c.psql("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
        dirty = int(c.psql("SELECT count(*) FROM pg_buffercache WHERE isdirty"))
        t0 = time.time()
        c.stop(mode)
        mark = len(open(c.log).read())
        t1 = time.time()
        c.start()
        t2 = time.time()
        for ln in open(c.log).read()[mark:].splitlines():  # the server's own timings
            if "redo done" in ln or "checkpoint complete" in ln or "elapsed:" in ln:
                print("   ", re.sub(r"^.*?(LOG|DETAIL):\s*", "", ln)[:200])
        t.prewarm()
        t3 = time.time()
        print(f"{mode} stop, fsync={fsync}: {tps:,.0f} TPS, WAL {wal / 2**20:,.0f} MiB, dirty "
              f"{dirty * 8 // 1024:,} MiB, stop {t1 - t0:.1f} s, start {t2 - t1:.1f} s, prewarm {t3 - t2:.1f} s, "
              f"together {t3 - t0:.1f} s", flush=True)
finally:
    c.destroy()
