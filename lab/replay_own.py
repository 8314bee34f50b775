"""A replay of a captured log of a database that is not pgbench's, end to end: a scratch cluster
with a shop's schema (customers, items, orders) under an application's load (pgbench running a
custom script: reads, a three-statement write transaction, 40 ms of think time: a
server far from saturated, as applications mostly keep theirs), `hpadvise capture` of
CAPTURE minutes of it, then `hpadvise validate --replay` of the capture, side by side.

    sudo .venv/bin/python lab/replay_own.py [CAPTURE [DURATION [BUFFERS]]]
    (defaults: 5m 10m 1GB; results in lab/results/replay-own.{json,html,txt})

The cluster and the capture are removed at the end; validate puts every knob back itself.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

from hpadvise.plugins.postgres.validate.bench import ScratchCluster

capture_for = sys.argv[1] if len(sys.argv) > 1 else "5m"
duration = sys.argv[2] if len(sys.argv) > 2 else "10m"
buffers = sys.argv[3] if len(sys.argv) > 3 else "1GB"
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "replay-own")
SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, balance numeric NOT NULL);
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, price numeric NOT NULL,
                    stock int NOT NULL);
CREATE TABLE orders (id bigserial PRIMARY KEY, customer int REFERENCES customers,
                     item int REFERENCES items, qty int NOT NULL,
                     at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON orders (customer);
INSERT INTO customers SELECT g, 'customer ' || g, 1000 FROM generate_series(1, 400000) g;
INSERT INTO items SELECT g, 'item ' || g, 1 + g % 97, 100000 FROM generate_series(1, 2000000) g;
INSERT INTO orders (customer, item, qty)
  SELECT 1 + g % 400000, 1 + g % 2000000, 1 FROM generate_series(1, 2000000) g;
"""
LOAD = r"""\set item random(1, 2000000)
\set cust random(1, 400000)
SELECT name, price, stock FROM items WHERE id = :item;
SELECT count(*), sum(qty) FROM orders WHERE customer = :cust;
BEGIN;
UPDATE items SET stock = stock - 1 WHERE id = :item;
INSERT INTO orders (customer, item, qty) VALUES (:cust, :item, 1);
UPDATE customers SET balance = balance - 1 WHERE id = :cust;
COMMIT;
\sleep 40 ms
"""


def seconds(text: str) -> int:
    return int(text[:-1]) * {"s": 1, "m": 60, "h": 3600}[text[-1]]


c = ScratchCluster({"shared_buffers": buffers, "logging_collector": "on",
                    "log_directory": "'log'", "max_connections": "50"})
work = tempfile.mkdtemp(prefix="hpadvise-lab-")
os.chmod(work, 0o755)
load = None
try:
    c.start()
    c.psql("CREATE DATABASE shop")
    c.psql(SCHEMA, "shop")
    c.psql("VACUUM ANALYZE", "shop")
    print("shop:", c.psql("SELECT pg_size_pretty(pg_database_size('shop'))"), flush=True)
    script = os.path.join(work, "load.sql")
    with open(script, "w") as f:
        f.write(LOAD)
    os.chmod(script, 0o644)
    load = subprocess.Popen([f"{c.bindir}/pgbench", "-h", c.tmp, "-p", str(c.port), "-U",
                             "postgres", "-n", "-f", script, "-c", "8", "-j", "2", "-P", "30",
                             "-T", str(seconds(capture_for) + 120), "shop"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(5)
    cap = os.path.join(work, "cap")
    cmd = [sys.executable, "-m", "hpadvise.cli", "capture", "--instance", c.datadir,
           "--duration", capture_for, "--output", cap]
    print("$", " ".join(cmd[2:]), flush=True)
    t0 = time.time()
    subprocess.run(cmd, check=True)
    print(f"capture took {time.time() - t0:.0f} s", flush=True)
    load.kill()
    print(load.communicate()[0][-600:], flush=True)
    load = None
    cmd = [sys.executable, "-m", "hpadvise.cli", "validate", "--replay", cap, "--duration",
           duration, "--variants", "current,recommended", "--json", "--output",
           OUT + ".json", "--html", OUT + ".html"]
    print("$", " ".join(cmd[2:]), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(OUT + ".txt", "w") as f:
        f.write("$ hpadvise " + " ".join(cmd[3:]) + "\n" + r.stdout + r.stderr)
    print(r.stdout[-4000:], r.stderr[-2000:], f"exit {r.returncode}", flush=True)
finally:
    if load is not None:
        load.kill()
    c.destroy()
    shutil.rmtree(work, ignore_errors=True)
