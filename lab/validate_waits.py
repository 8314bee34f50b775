#!/usr/bin/env python3
"""What each scratch server's client backends waited on, second by second, during a validate
run: every scratch PostgreSQL (its socket in /tmp/hpadvise-pg-*) is asked four times a second
what its client backends are doing (pg_stat_activity: the wait event, or running on a CPU), over
one psql session per server that stays open until the server stops; then the samples are read
against each run's seconds, to say what a server's backends were doing in the seconds its rate
fell.

    python3 lab/validate_waits.py sample OUT.jsonl SECONDS &  # beside validate --output RUN.json
    python3 lab/validate_waits.py read RUN.json OUT.jsonl [VMSTAT.jsonl]

`read` names the servers as lab/validate_pgstate.py does, then prints for each server the share
of backend samples in each state over the measured seconds where its rate held (within 10% of
the run's median second for it) and over those where it fell by more than 15%, and the epochs
with most fallen seconds; given lab/vmstat_during.py's samples of the same run, also the host's
CPU steal and iowait in those seconds. Standard library and psql only.
"""

from __future__ import annotations

import glob
import json
import os
import select
import statistics
import subprocess
import sys
import time
from collections import Counter

from validate_pgstate import server_names
from vmstat_during import samples_of

# idle: between transactions, the backend waits for pgbench's next one (ClientRead); within
# one, between its statements, it shows as Client:ClientRead
Q = ("SELECT CASE WHEN state = 'idle' THEN 'idle (waits for pgbench)' ELSE "
     "coalesce(wait_event_type || ':' || wait_event, 'CPU') END, count(*) "
     "FROM pg_stat_activity WHERE backend_type = 'client backend' "
     "AND pid <> pg_backend_pid() GROUP BY 1;\n\\echo __end__\n")


class Session:
    """One psql on one scratch server, asked again and again; None once the server is gone."""

    def __init__(self, sock_dir: str, port: str):
        psql = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"))[-1]
        self.p = subprocess.Popen([psql, "-h", sock_dir, "-p", port, "-U", "postgres", "-XAtq",
                                   "-F", "\t", "-v", "ON_ERROR_STOP=1", "postgres"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, bufsize=0)

    def ask(self, timeout: float = 1.0) -> dict | None:
        """One answer, read unbuffered up to its end mark; None where psql has ended or
        does not answer in time."""
        try:
            self.p.stdin.write(Q.encode())
        except (BrokenPipeError, OSError):
            return None
        got, end = b"", time.time() + timeout
        while not got.endswith(b"__end__\n"):
            ready, _, _ = select.select([self.p.stdout], [], [], max(0.0, end - time.time()))
            chunk = os.read(self.p.stdout.fileno(), 65536) if ready else b""
            if not chunk:
                return None
            got += chunk
        out: dict[str, int] = {}
        for line in got.decode().splitlines()[:-1]:
            state, n = line.split("\t")
            out[state] = int(n)
        return out

    def close(self) -> None:
        self.p.kill()
        self.p.wait()


def sample(out: str, seconds: float, every: float = 0.25) -> None:
    end = time.time() + seconds
    sessions: dict[str, Session] = {}
    with open(out, "w") as f:
        while time.time() < end:
            socks = {os.path.dirname(s): s.rsplit(".", 1)[1]
                     for s in glob.glob("/tmp/hpadvise-pg-*/.s.PGSQL.*")
                     if s.rsplit(".", 1)[1].isdigit()}  # not the socket's .lock file
            row = {}
            for d, port in socks.items():
                s = sessions.get(d) or Session(d, port)
                sessions[d] = s
                got = s.ask()
                if got is None:  # the server stopped: a new session once it is back
                    s.close()
                    del sessions[d]
                else:
                    row[d] = got
            for d in [d for d in sessions if d not in socks]:
                sessions.pop(d).close()
            if row:
                f.write(json.dumps({"t": time.time(), "servers": row}) + "\n")
                f.flush()
            time.sleep(every)
    for s in sessions.values():
        s.close()


def host_cpu(vmstat: str | None) -> list[tuple[float, float, float]]:
    """(time, steal %, iowait %) over each second lab/vmstat_during.py sampled /proc/stat."""
    if not vmstat:
        return []
    vm = samples_of(vmstat)
    out = []
    for a, b in zip(vm, vm[1:]):
        d = [y - x for x, y in zip(a["cpu"], b["cpu"])]
        out.append((b["t"], 100 * d[7] / max(1, sum(d)), 100 * d[4] / max(1, sum(d))))
    return out


def read(run: str, samples: str, vmstat: str | None = None) -> None:
    r = json.load(open(run))
    polls = [json.loads(ln) for ln in open(samples)]
    cpu = host_cpu(vmstat)
    steal: dict[str, list[float]] = {"held": [], "fell": []}
    iowait: dict[str, list[float]] = {"held": [], "fell": []}
    name = server_names(r)
    warm = r["meta"]["warm_s"]
    held: dict[int, Counter] = {0: Counter(), 1: Counter()}
    fell: dict[int, Counter] = {0: Counter(), 1: Counter()}
    fallen_in: Counter = Counter()
    seconds = {0: [0, 0], 1: [0, 0]}
    for s in r["samples"]:
        srv = s["server"]
        rates = [p for p in s["progress"] if p[0] > warm]
        if not rates:
            continue
        mid = statistics.median(p[1] for p in rates)
        for t, tps, *_ in rates:
            lo, hi = s["started"] + t - 1, s["started"] + t
            states = Counter()
            for p in polls:
                if lo <= p["t"] < hi:
                    for d, got in p["servers"].items():
                        if name.get(d) == srv:
                            states.update(got)
            if tps < 0.85 * mid:
                fell[srv].update(states)
                seconds[srv][1] += 1
                fallen_in[(s["epoch"] + 1, srv)] += 1
                kind = "fell"
            elif abs(tps - mid) <= 0.10 * mid:
                held[srv].update(states)
                seconds[srv][0] += 1
                kind = "held"
            else:
                continue
            for t_cpu, st, io in cpu:
                if lo < t_cpu <= hi + 0.5:
                    steal[kind].append(st)
                    iowait[kind].append(io)
    for srv in (0, 1):
        keys = sorted(set(held[srv]) | set(fell[srv]),
                      key=lambda k: -(held[srv][k] + fell[srv][k]))
        th, tf = sum(held[srv].values()) or 1, sum(fell[srv].values()) or 1
        print(f"\nserver {srv}: {seconds[srv][0]} seconds held, {seconds[srv][1]} fell")
        print("| backends | share where the rate held | share where it fell |")
        print("|---|---:|---:|")
        for k in keys[:12]:
            print(f"| {k} | {100 * held[srv][k] / th:.1f}% | {100 * fell[srv][k] / tf:.1f}% |")
    print("\nepochs with most fallen seconds (epoch, server): "
          + ", ".join(f"{e} on {s}: {n}" for (e, s), n in fallen_in.most_common(8)))
    for kind in ("held", "fell"):
        if steal[kind]:
            st, io = statistics.mean(steal[kind]), statistics.mean(iowait[kind])
            print(f"host CPU where a server's rate {kind}: steal {st:.1f}%, iowait {io:.1f}% "
                  "(mean of "
                  f"{len(steal[kind])} seconds)")


if __name__ == "__main__":
    if sys.argv[1] == "sample":
        sample(sys.argv[2], float(sys.argv[3]))
    else:
        read(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
