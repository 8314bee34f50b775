"""The command on the card, `apply --db postgres --restart --yes`, on a host with several
clusters: the plan for every one of them, restarted one at a time, stopping at the first
failure with what it had changed for the others undone or named. Run in a PID namespace of
its own (unshare), where only the throwaway clusters it starts can be seen: the system's own
cluster, which the tests never change, is out of its sight."""

import json

import pytest

from support import REPO, host_state, in_own_pid_namespace

pytestmark = [pytest.mark.integration, pytest.mark.live]

SCRIPT = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
from support import PgCluster, run_cli, check_json, instance
j, root, out = sys.argv[2:5]
made = []
res = {}
def cluster(buffers):
    c = PgCluster({"shared_buffers": buffers, "huge_pages": "try"})
    made.append(c)
    c.start()
    return c
def backing(*cs):
    report, _ = check_json("--db", "postgres")
    return [instance(report, c.datadir)["backing"] for c in cs]
try:
    a, b = cluster("64MB"), cluster("128MB")
    cmd = ["apply", "--db", "postgres", "--restart", "--yes", "--json", "--journal-dir", j,
           "--persist-root", root]
    r = run_cli(*cmd)
    res["all"] = [r.returncode, json.loads(r.stdout or "{}"), r.stderr]
    first = [c["instance"] for c in res["all"][1].get("changes", []) if c["kind"] == "pg_restart"]
    if first and first[0] != f"postgres:{a.port}":  # a: the one restarted first
        a, b = b, a
    res["all_backing"] = backing(a, b)
    res["all_huge_pages"] = [a.psql("SHOW huge_pages"), b.psql("SHOW huge_pages")]
    r = run_cli("rollback", "--yes", "--journal-dir", j)
    res["rollback"] = [r.returncode, r.stdout, r.stderr]
    res["rolled_backing"] = backing(a, b)
    # b waits for a restart that needs far more memory than the plan sizes: its restart
    # onto huge_pages = on fails; a, restarted before it, keeps what it runs with
    b.psql("ALTER SYSTEM SET shared_buffers = '512MB'")
    res["before_fail"] = open(f"{b.datadir}/postgresql.auto.conf").read()
    r = run_cli(*cmd)
    res["fail"] = [r.returncode, json.loads(r.stdout or "{}"), r.stderr]
    res["fail_backing"] = backing(a, b)
    res["fail_huge_pages"] = [a.psql("SHOW huge_pages"), b.psql("SHOW huge_pages")]
    res["after_fail"] = open(f"{b.datadir}/postgresql.auto.conf").read()
    r = run_cli("rollback", "--yes", "--journal-dir", j)
    res["rollback2"] = [r.returncode, r.stdout, r.stderr]
    res["final_huge_pages"] = [a.psql("SHOW huge_pages"), b.psql("SHOW huge_pages")]
    res["ids"] = [f"postgres:{a.port}", f"postgres:{b.port}"]
finally:
    for c in made:
        c.destroy()
    open(out, "w").write(json.dumps(res))
'''


def test_every_cluster_one_at_a_time_and_the_first_failure_stops_it(knobs, tmp_path):
    before = host_state()
    j, root = tmp_path / "journal", tmp_path / "root"
    root.mkdir()
    out = tmp_path / "out.json"
    r = in_own_pid_namespace(tmp_path, SCRIPT, [str(REPO / "tests"), str(j), str(root),
                                                str(out)], j, 600)
    assert out.exists(), r.stdout[-1500:] + r.stderr[-1500:]
    res = json.loads(out.read_text())
    assert "rollback2" in res, (r.stderr[-2000:], res)
    a, b = res["ids"]
    # every cluster, one restart each, the plan's order; both on huge pages
    rc, plan, err = res["all"]
    assert rc == 0 and plan["status"] == "ok", (err, plan)
    restarts = [c["instance"] for c in plan["changes"] if c["kind"] == "pg_restart"]
    assert restarts == [a, b] and a < b, plan["changes"]  # one each, in a stable order
    assert res["all_backing"] == ["hugetlb", "hugetlb"]
    assert res["all_huge_pages"] == ["on", "on"]
    assert res["rollback"][0] == 0 and res["rolled_backing"] == ["4k", "4k"]
    # the first failure stops it: a runs with its changes (kept for it, said), b's setting is
    # put back and b started again as it was; nothing waits for a restart
    rc, out_fail, err = res["fail"]
    assert rc == 1 and out_fail["status"] == "restart-failed", (err, out_fail)
    assert res["fail_backing"] == ["hugetlb", "4k"]
    assert res["fail_huge_pages"] == ["on", "try"]
    assert res["after_fail"] == res["before_fail"]
    assert out_fail["restart_needed"] == [], out_fail
    assert f"kept for {a}" in err and "could not map anonymous shared memory" in err
    assert res["rollback2"][0] == 0, res["rollback2"]
    # b runs on its previous settings already: rollback restarts a only
    assert f"restored: restart {a}" in res["rollback2"][1]
    assert f"restart {b}" not in res["rollback2"][1]
    assert res["final_huge_pages"] == ["try", "try"]
    assert host_state() == before
    assert not list(root.iterdir())
