"""validate on the user's own data and statements, with real servers: a cluster with a schema of
its own (a shop, not pgbench's tables) under a mixed read/write load, its statements captured
by `hpadvise capture` (both log routes: csvlog through the logging collector, and stderr to a
file), replayed with pgreplay on copies side by side; a user's pgbench script and sysbench Lua
script through --script; and what is refused, with nothing left behind."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import host_state, run_cli, scratch_dirs

pytestmark = [pytest.mark.integration, pytest.mark.live]

SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, balance numeric NOT NULL);
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, price numeric NOT NULL,
                    stock int NOT NULL);
CREATE TABLE orders (id bigserial PRIMARY KEY, customer int REFERENCES customers,
                     item int REFERENCES items, qty int NOT NULL,
                     at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON orders (customer);
INSERT INTO customers SELECT g, 'customer ' || g, 1000 FROM generate_series(1, 20000) g;
INSERT INTO items SELECT g, 'item ' || g, 1 + g % 97, 100000 FROM generate_series(1, 50000) g;
"""
# An application's transaction with its reads, and a few milliseconds of think time. Each
# client writes rows of its own (pgbench's :client_id, 0-3): sessions that wait on each
# other's row locks can stall pgreplay, whose replay order is the log's (docs/validate.md);
# the copies' lock_timeout would then count errors, and these tests ask for none.
LOAD = r"""\set item :client_id * 10000 + random(1, 10000)
\set cust :client_id * 5000 + random(1, 5000)
\set other random(1, 50000)
SELECT name, price, stock FROM items WHERE id = :other;
SELECT count(*) FROM orders WHERE customer = :cust;
BEGIN;
UPDATE items SET stock = stock - 1 WHERE id = :item;
INSERT INTO orders (customer, item, qty) VALUES (:cust, :item, 1);
UPDATE customers SET balance = balance - 1 WHERE id = :cust;
COMMIT;
\sleep 5 ms
"""
LOGGING = ("log_statement", "log_connections", "log_disconnections", "log_destination",
           "log_line_prefix", "lc_messages", "log_min_error_statement")


def shop(pg_factory, collector: bool):
    settings = {"logging_collector": "on", "log_directory": "'log'"} if collector else {}
    c = pg_factory(settings)
    c.start()
    c.psql("CREATE DATABASE shop")
    c.psql(SCHEMA, "shop")
    return c


def logging_state(c) -> dict:
    return {k: c.psql(f"SHOW {k}") for k in LOGGING} | {
        "auto.conf": Path(f"{c.datadir}/postgresql.auto.conf").read_bytes()}


def load(c, tmp_path, seconds: int) -> subprocess.Popen:
    script = tmp_path / "load.sql"
    script.write_text(LOAD)
    os.chmod(tmp_path, 0o755)
    os.chmod(script, 0o644)
    return subprocess.Popen([f"{c.bindir}/pgbench", "-h", c.tmp, "-p", str(c.port), "-U",
                             "postgres", "-n", "-f", str(script), "-c", "4", "-T", str(seconds),
                             "shop"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def capture(c, tmp_path, out, seconds: int, *extra: str) -> subprocess.CompletedProcess:
    before = logging_state(c)
    p = load(c, tmp_path, seconds + 15)
    try:
        deadline = time.monotonic() + 30  # until the load's four clients are connected
        while c.psql("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                     "'pgbench'") != "4" and time.monotonic() < deadline:
            time.sleep(0.1)
        r = run_cli("capture", "--instance", c.datadir, "--duration", f"{seconds}s",
                    "--output", str(out), "--journal-dir", str(tmp_path / "journal"), *extra,
                    timeout=300)
    finally:
        p.kill()
        p.wait()
    assert r.returncode == 0, r.stderr[-2000:]
    assert logging_state(c) == before  # every logging setting as before the capture
    assert "statement log holds the data" in r.stderr  # the privacy warning
    assert os.stat(out).st_mode & 0o777 == 0o700
    h = run_cli("history", "--json", "--journal-dir", str(tmp_path / "journal"))
    [j] = [j for j in json.loads(h.stdout) if j["argv"][:1] == ["capture"]][-1:]
    assert j["status"] == "capture" and j["rolled_back"] and j["changes"] >= 6
    return r


def replayed(res: dict) -> None:
    """Every measured run replayed the same statements as the unmeasured one, none failed."""
    cal = res["meta"]["calibration"]
    assert cal["errors"] == 0 and cal["statements"] > 1000
    assert res["samples"] and all(s["work"] == cal["statements"] and s["errors"] == 0
                                  for s in res["samples"])
    assert {s["variant"] for s in res["samples"]} == set(res["variants"])


def test_capture_then_replay_side_by_side(knobs, pg_factory, tmp_path):
    """The whole path on csvlog: capture (base backup, then 5 s of statements), then
    validate --replay on copies of the base backup, side by side, with a verdict and CI."""
    c = shop(pg_factory, collector=True)
    out = tmp_path / "cap"
    capture(c, tmp_path, out, 5)
    meta = json.loads((out / "capture.json").read_text())
    assert meta["format"] == "csv" and meta["base"] == "base" and meta["bytes"] > 0
    assert (out / "base" / "PG_VERSION").exists() and not meta["restore_errors"]
    lines = (out / "statements.csv").read_text().splitlines()
    assert any("UPDATE items SET stock" in ln for ln in lines)
    assert not any("ALTER SYSTEM" in ln for ln in lines)  # none of the capture's own
    src_pid, host, dirs = c.pid, host_state(), scratch_dirs()
    # the interval needs two epochs: 15 s held three on the faster machine, and one where a
    # loaded machine took 8.4 s an epoch; 22 s holds two up to 11 s an epoch
    r = run_cli("validate", "--replay", str(out), "--duration", "22s", "--variants",
                "current,recommended", "--json", "--output", str(tmp_path / "r.json"),
                "--html", str(tmp_path / "r.html"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "r.json").read_text())
    m = res["meta"]
    assert m["bench"] == "replay" and m["design"] == "simultaneous"
    assert m["workload_origin"].startswith("replay of ") and "pgreplay" in m["workload_origin"]
    assert "base backup" in m["data_origin"] and m["scale"] == 0
    replayed(res)
    [e] = res["effects"]
    assert e["n"] >= 2 and e["lo_pct"] <= e["pct"] <= e["hi_pct"]
    assert res["variants"]["recommended"]["backing"] == "hugetlb"
    assert "workload origin: replay of" in r.stdout and "data origin:" in r.stdout
    assert "replay of" in (tmp_path / "r.html").read_text()
    assert host_state() == host and scratch_dirs() == dirs and c.pid == src_pid


def test_copy_of_an_instance_replays_a_stderr_log(knobs, pg_factory, tmp_path):
    """stderr route (no logging collector: the capture reads the server's log file, with
    pgreplay's prefix), no base backup; replayed with --instance --copy as an A/A run."""
    c = shop(pg_factory, collector=False)
    out = tmp_path / "cap"
    capture(c, tmp_path, out, 5, "--no-base", "--yes")
    meta = json.loads((out / "capture.json").read_text())
    assert meta["format"] == "stderr" and meta["base"] is None
    assert (out / "statements.log").read_text().startswith("20")  # '%m|...' lines
    dirs, src_pid = scratch_dirs(), c.pid
    r = run_cli("validate", "--instance", c.datadir, "--copy", "--replay",
                str(out / "statements.log"), "--duration", "15s", "--variants",
                "current,current", "--json", "--output", str(tmp_path / "r.json"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["meta"]["data_origin"].startswith(f"a copy of {c.datadir}")
    replayed(res)
    assert scratch_dirs() == dirs and c.pid == src_pid
    assert c.psql("SELECT count(*) FROM pg_database WHERE datname LIKE 'hpadvise%'") == "0"


def test_a_killed_capture_is_rolled_back(pg_factory, tmp_path):
    c = shop(pg_factory, collector=True)
    before = logging_state(c)
    journal = tmp_path / "journal"
    p = subprocess.Popen([sys.executable, "-m", "hpadvise.cli", "capture", "--instance",
                          c.datadir, "--duration", "5m", "--no-base", "--output",
                          str(tmp_path / "cap"), "--journal-dir", str(journal)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while c.psql("SHOW log_statement") != "all" and time.time() < deadline:
        time.sleep(0.2)
    assert c.psql("SHOW log_statement") == "all"
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert logging_state(c) != before  # the kill left the settings changed
    r = run_cli("rollback", "--yes", "--journal-dir", str(journal))
    assert r.returncode == 0, r.stderr
    deadline = time.time() + 10
    while logging_state(c) != before and time.time() < deadline:
        time.sleep(0.2)  # the reload is asynchronous
    assert logging_state(c) == before


def test_scripts_of_the_user(knobs, pg_factory, tmp_path):
    """A pgbench script on a copy of the shop (--instance --copy --database), and a sysbench
    Lua script on generated data: run as the built-in workloads are, named with their hash."""
    c = shop(pg_factory, collector=False)
    sql = tmp_path / "orders.sql"
    sql.write_text(LOAD.replace("\\sleep 5 ms\n", "").replace(":client_id * 10000 + ", "")
                   .replace(":client_id * 5000 + ", ""))  # any clients, any rows
    os.chmod(tmp_path, 0o700)  # the server's OS user cannot read it: validate copies it
    dirs = scratch_dirs()
    r = run_cli("validate", "--instance", c.datadir, "--copy", "--script", str(sql),
                "--database", "shop", "--duration", "12s", "--run-seconds", "3",
                "--warmup-seconds", "1", "--variants", "current,current", "--json",
                "--output", str(tmp_path / "s.json"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((tmp_path / "s.json").read_text())["meta"]
    assert m["workload_origin"].startswith(f"script {sql} (sha256 ")
    assert m["data_origin"].startswith("a copy of")
    assert all("-f" in cmd and cmd[-1] == "shop" for cmd in m["bench_commands"].values())
    assert m["design"] == "simultaneous"  # copies can be doubled, the instance cannot
    lua = tmp_path / "pick.lua"
    lua.write_text('function event()\n  local con = sysbench.sql.driver():connect()\n'
                   '  con:query("SELECT 1")\n  con:disconnect()\nend\n')
    r = run_cli("validate", "--bench", "tpcc", "--script", str(lua), "--duration", "10s",
                "--shared-buffers", "128MB", "--scale", "1", "--run-seconds", "3",
                "--warmup-seconds", "1", "--variants", "current,hugepages-off", "--json",
                "--output", str(tmp_path / "l.json"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "l.json").read_text())
    assert res["meta"]["workload_origin"].startswith(f"script {lua}")
    assert all(s["tps"] > 0 for s in res["samples"])
    # run from the server's own copy of it (the clients' OS user may not read the original)
    assert all(any(a.endswith("/pick.lua") for a in cmd)
               for cmd in res["meta"]["bench_commands"].values())
    # restarting per run (side by side is the default): large_pages switched on the one
    # server from run to run, each run on its variant's pages
    r = run_cli("validate", "--db", "mysql", "--script", str(lua), "--duration", "15s",
                "--shared-buffers", "256MB", "--scale", "1", "--run-seconds", "3",
                "--warmup-seconds", "1", "--variants", "current,recommended", "--design",
                "restart", "--json", "--output", str(tmp_path / "m.json"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "m.json").read_text())
    assert res["meta"]["workload_origin"].startswith(f"script {lua}")
    assert all(s["tps"] > 0 for s in res["samples"])
    assert res["meta"]["design"] == "restart"
    assert {(s["variant"], s["backing"]) for s in res["samples"]} == {
        ("current", "4k"), ("recommended", "hugetlb")}
    r = run_cli("validate", "--db", "mysql", "--replay", str(lua))
    assert r.returncode == 2 and "--replay runs on postgres only" in r.stderr, r.stderr
    assert scratch_dirs() == dirs


def test_what_is_refused_leaves_nothing(knobs, pg_factory, tmp_path):
    """A log pgreplay cannot parse, statements that fail on the data they are given, and a
    script that fails on the copy: one line each, exit 2, no copy left, the source as it was."""
    c = shop(pg_factory, collector=False)
    empty = pg_factory()  # a database of the shop's name, and none of its tables
    empty.start()
    empty.psql("CREATE DATABASE shop")
    bad = tmp_path / "bad.csv"
    bad.write_text("this is not a log\n")
    failing = tmp_path / "failing.sql"
    failing.write_text("SELECT * FROM no_such_table;\n")
    cap = tmp_path / "cap"
    capture(c, tmp_path, cap, 5, "--no-base", "--yes")
    dirs, host = scratch_dirs(), host_state()
    cases = [
        (["--instance", c.datadir, "--copy", "--replay", str(bad)], "not a statement log"),
        # the shop's statements on a copy of an empty cluster: every one fails
        (["--instance", empty.datadir, "--copy", "--replay", str(cap / "statements.log")],
         "replayed statements"),
        (["--instance", c.datadir, "--copy", "--script", str(failing), "--database", "shop"],
         "no_such_table"),
    ]
    for args, said in cases:
        r = run_cli("validate", *args, "--duration", "60s", "--variants", "current,current",
                    timeout=300)
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("hpadvise: error")]
        assert r.returncode == 2 and len(lines) == 1 and said in lines[0], (args, r.stderr)
        assert scratch_dirs() == dirs and host_state() == host
    assert c.psql("SELECT count(*) FROM items", "shop") == "50000"
    # a capture whose base backup cannot be taken: said, no directory, no setting changed
    closed = pg_factory({"max_wal_senders": "0", "wal_level": "minimal"})
    closed.start()
    before = logging_state(closed)
    r = run_cli("capture", "--instance", closed.datadir, "--duration", "10s", "--output",
                str(tmp_path / "nocap"), "--journal-dir", str(tmp_path / "journal"), "--yes")
    assert r.returncode == 2 and "pg_basebackup" in r.stderr and "max_wal_senders" in r.stderr
    assert not (tmp_path / "nocap").exists() and logging_state(closed) == before


def test_copies_that_do_not_fit_are_refused_before_any_is_made(knobs, pg_factory, tmp_path):
    """TMPDIR on a 64 MiB tmpfs: two copies of the shop and their WAL do not fit; said with
    the figures, before anything is copied or changed."""
    c = shop(pg_factory, collector=False)
    sql = tmp_path / "orders.sql"
    sql.write_text(LOAD)
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(small)],
                   check=True)
    try:
        host = host_state()
        r = run_cli("validate", "--instance", c.datadir, "--copy", "--script", str(sql),
                    "--database", "shop", "--duration", "60s", "--variants",
                    "current,recommended", env={"TMPDIR": str(small)}, timeout=120)
        assert r.returncode == 2, r.stderr
        [line] = [ln for ln in r.stderr.splitlines() if ln.startswith("hpadvise: error")]
        assert "2 copies of" in line and "is free" in line and str(small) in line
        assert os.listdir(small) == [] and host_state() == host
    finally:
        subprocess.run(["umount", str(small)], check=True)
