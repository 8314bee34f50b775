"""hpadvise's TPC-C for sysbench on real throwaway servers: prepare at scale 1, run briefly,
and the consistency conditions of TPC-C clause 3.3.2 hold afterwards, checked by the script's
own `check` and again here in SQL. Plus the failures a user meets: tables never prepared,
broken consistency."""

import subprocess

import pytest

from hpadvise.benchmarks.sysbench import Sysbench

pytestmark = pytest.mark.integration


def _conditions(query) -> list[str]:
    """Clause 3.3.2.1, 3.3.2.2 and 3.3.2.4, computed independently of the Lua script."""
    bad = []
    for w, wytd, dytd in query("SELECT w_id, w_ytd, (SELECT SUM(d_ytd) FROM district1 "
                               "WHERE d_w_id = w_id) FROM warehouse1"):
        if float(wytd) != float(dytd):
            bad.append(f"1: w {w}: {wytd} != {dytd}")
    rows = query("SELECT d_w_id, d_id, d_next_o_id, "
                 "(SELECT MAX(o_id) FROM orders1 WHERE o_w_id = d_w_id AND o_d_id = d_id), "
                 "(SELECT MAX(no_o_id) FROM new_order1 WHERE no_w_id = d_w_id AND "
                 "no_d_id = d_id), "
                 "(SELECT SUM(o_ol_cnt) FROM orders1 WHERE o_w_id = d_w_id AND o_d_id = d_id), "
                 "(SELECT COUNT(*) FROM order_line1 WHERE ol_w_id = d_w_id AND ol_d_id = d_id) "
                 "FROM district1")
    assert len(rows) == 10
    for w, d, nxt, max_o, max_no, ol_cnt, ol_rows in rows:
        if not (nxt - 1 == max_o == max_no):
            bad.append(f"2: d {d}: {nxt - 1}, {max_o}, {max_no}")
        if int(ol_cnt) != int(ol_rows):
            bad.append(f"4: d {d}: {ol_cnt} != {ol_rows}")
    return bad


def _exercise(bench: Sysbench, query):
    # never prepared: one clear line, non-zero exit, nothing created
    with pytest.raises(RuntimeError) as e:
        bench.check()
    assert "never prepared" in str(e.value) and "prepare" in str(e.value)
    p = subprocess.run(bench.command(2, 2), capture_output=True, text=True)
    assert p.returncode != 0 and "run the prepare command first" in p.stdout + p.stderr
    bench.prepare()
    counts = {t: query(f"SELECT COUNT(*) FROM {t}1")[0][0]
              for t in ("warehouse", "district", "customer", "history", "orders", "new_order",
                        "item", "stock")}
    assert counts == {"warehouse": 1, "district": 10, "customer": 30000, "history": 30000,
                      "orders": 30000, "new_order": 9000, "item": 100000, "stock": 100000}
    assert _conditions(query) == []
    orders0 = counts["orders"]
    p = subprocess.run(bench.command(4, 3), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-1500:]
    assert "transactions:" in p.stdout
    assert "tpcc: consistency conditions 1-4 hold" in bench.check()
    assert _conditions(query) == []
    # the mix ran: new orders were entered, payments logged, deliveries made. A delivery
    # gives an order its carrier (prepare leaves 21000 of 30000 delivered), so it is counted
    # there: the new_order rows alone can come back to 9000 when entries and deliveries balance
    assert query("SELECT COUNT(*) FROM orders1")[0][0] > orders0
    assert query("SELECT COUNT(*) FROM history1")[0][0] > 30000
    assert query("SELECT COUNT(*) FROM orders1 WHERE o_carrier_id IS NOT NULL")[0][0] > 21000
    # a broken database: check names the condition and fails
    query("UPDATE warehouse1 SET w_ytd = w_ytd + 1 WHERE w_id = 1")
    with pytest.raises(RuntimeError, match="consistency condition"):
        bench.check()
    bench.cleanup()
    assert not query("SELECT table_name FROM information_schema.tables WHERE "
                     "table_name = 'warehouse1'")


def test_tpcc_mariadb(my_factory):
    m = my_factory({"innodb-buffer-pool-size": "256M"})
    m.start()
    m.sql("CREATE DATABASE tpcc")
    _exercise(Sysbench({"driver": "mysql", "socket": m.socket, "user": "root", "db": "tpcc"}),
              lambda q: [tuple(int(x) if x and x.lstrip("-").isdigit() else x for x in r)
                         for r in m.sql(q, "tpcc")])  # values come back as text


def test_tpcc_without_a_transactional_engine(my_factory):
    m = my_factory()
    m.start()
    m.sql("CREATE DATABASE tpcc")
    bench = Sysbench({"driver": "mysql", "socket": m.socket, "user": "root", "db": "tpcc"})
    cmd = bench._base()[:2] + ["--mysql-storage-engine=NoSuchEngine"] + bench._base()[2:] + \
        ["prepare"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode != 0
    assert "tpcc: cannot create the tables" in p.stderr and "transactional" in p.stderr
    assert m.sql("SHOW TABLES", "tpcc") == []  # nothing half-made


def test_tpcc_postgres(pg_factory):
    c = pg_factory({"shared_buffers": "256MB"})
    c.start()
    c.psql("CREATE DATABASE tpcc")

    def query(q):
        out = c.psql(q, "tpcc")
        return [tuple(int(x) if x.lstrip("-").isdigit() else (x or None) for x in ln.split("|"))
                for ln in out.splitlines()] if out else []

    _exercise(Sysbench({"driver": "pgsql", "host": c.tmp, "port": c.port, "user": "postgres",
                        "db": "tpcc"}), query)
