#!/usr/bin/env python3
"""What each scratch server's data went through during a validate run: poll every running
scratch PostgreSQL (its socket in /tmp/hpadvise-pg-*) every few seconds for the size of
pgbench_accounts and its primary key, its updates (HOT and not), its dead tuples, vacuums, and
the database's blocks read from outside shared_buffers; then read the polls against the run's
epochs.

    python3 lab/validate_pgstate.py sample OUT.jsonl SECONDS &  # beside validate --output RUN.json
    python3 lab/validate_pgstate.py read RUN.json OUT.jsonl

`read` names each server by the socket directory its last epoch's bench command used
(meta.bench_commands) and the server index that epoch gave each variant, then prints per epoch
the ratio, which server ran current, and each server's accounts heap and index size (MB), the
share of its updates that were HOT and its blocks read during the epoch.
Standard library and psql only; a poll is one short query, run as root over the socket."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time

Q = ("SELECT pg_relation_size('pgbench_accounts'), pg_relation_size('pgbench_accounts_pkey'), "
     "s.n_tup_upd, s.n_tup_hot_upd, s.n_dead_tup, s.vacuum_count + s.autovacuum_count, "
     "d.blks_read, d.blks_hit FROM pg_stat_user_tables s, pg_stat_database d "
     "WHERE s.relname = 'pgbench_accounts' AND d.datname = current_database()")


def poll() -> dict:
    out = {}
    psql = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"))[-1]
    for sock in glob.glob("/tmp/hpadvise-pg-*/.s.PGSQL.*"):
        d, port = os.path.dirname(sock), sock.rsplit(".", 1)[1]
        r = subprocess.run([psql, "-h", d, "-p", port, "-U", "postgres", "-XAtq", "-F", ",",
                            "-c", Q, "postgres"], capture_output=True, text=True, timeout=5)
        if r.returncode == 0 and r.stdout.strip():
            out[d] = [int(x) for x in r.stdout.strip().split(",")]
    return out


def sample(out: str, seconds: float, every: float = 3.0) -> None:
    end = time.time() + seconds
    with open(out, "w") as f:
        while time.time() < end:
            try:
                p = poll()
            except subprocess.TimeoutExpired:
                p = {}
            if p:
                f.write(json.dumps({"t": time.time(), "servers": p}) + "\n")
                f.flush()
            time.sleep(every)


def server_names(r: dict) -> dict[str, int]:
    """A run's scratch servers, socket directory -> server index: the directory each
    variant's bench command used in the last epoch, and the server that epoch gave it."""
    last = max(s["epoch"] for s in r["samples"])
    idx = {s["variant"]: s["server"] for s in r["samples"] if s["epoch"] == last}
    name = {}
    for v, cmd in r["meta"]["bench_commands"].items():
        name[cmd[cmd.index("-h") + 1]] = idx[v]
    return name


def read(run: str, samples: str) -> None:
    r = json.load(open(run))
    polls = [json.loads(ln) for ln in open(samples)]
    name = server_names(r)
    length = r["meta"]["run_s"] + r["meta"]["warm_s"]

    def at(t: float, srv: int):
        best = None
        for p in polls:
            for d, vals in p["servers"].items():
                if name.get(d) == srv and (best is None or abs(p["t"] - t) < abs(best[0] - t)):
                    best = (p["t"], vals)
        return best[1] if best else None
    by: dict[int, dict] = {}
    for s in r["samples"]:
        by.setdefault(s["epoch"], {})[s["variant"]] = s
    print("| epoch | ratio | current on | server 0: heap, index MB, HOT %, read | "
          "server 1: heap, index MB, HOT %, read |")
    print("|---:|---:|---:|---|---|")
    for ep in sorted(by):
        ss = by[ep]
        if not {"current", "recommended"} <= set(ss):
            continue
        t0 = min(s["started"] for s in ss.values())
        cells = []
        for srv in (0, 1):
            a, b = at(t0, srv), at(t0 + length, srv)
            if not a or not b:
                cells.append("?")
                continue
            upd, hot = b[2] - a[2], b[3] - a[3]
            cells.append(f"{b[0] / 2**20:.1f}, {b[1] / 2**20:.1f}, "
                         f"{100 * hot / max(1, upd):.0f}%, {b[6] - a[6]:,}")
        ratio = ss["recommended"]["tps"] / ss["current"]["tps"]
        print(f"| {ep + 1} | {ratio:.3f} | {ss['current']['server']} | " + " | ".join(cells)
              + " |")


if __name__ == "__main__":
    if sys.argv[1] == "sample":
        sample(sys.argv[2], float(sys.argv[3]))
    else:
        read(sys.argv[2], sys.argv[3])
