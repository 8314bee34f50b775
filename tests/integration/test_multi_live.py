"""PostgreSQL, MariaDB and a JVM on one host at once: one plan, applied, lets all three run on
huge pages from the one pool; rollback restores the host and the servers."""

import json
from pathlib import Path

import pytest

from support import check_json, host_state, run_cli

pytestmark = pytest.mark.integration

NR = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")


def _by(report, pred):
    return next(i for i in report["instances"] if pred(i))


def test_one_plan_for_three_engines(pg_factory, my_factory, java, knobs, tmp_path):
    knobs.pool(2048, 0)
    pg = pg_factory({"shared_buffers": "256MB", "huge_pages": "try"})
    pg.start()
    my = my_factory({"innodb-buffer-pool-size": "256M"})
    my.start()
    jv = java("-Xmx256m", "-Xms256m")
    report, r = check_json("--db", "postgres", "--db", "mysql", "--db", "jvm", "--profile", "jvm")
    assert r.returncode == 0, r.stderr
    ipg = _by(report, lambda i: i["id"] == f"postgres:{pg.port}")
    imy = _by(report, lambda i: i["engine"] == "mysql" and
              i["settings"]["data_directory"].rstrip("/") == my.datadir)
    ijv = _by(report, lambda i: i["id"] == f"jvm:{jv.pid}")
    need = sum(i["demand"]["pages"]["2048"] for i in (ipg, imy, ijv))
    before = host_state(persist_root=str(tmp_path / "root"))
    cnf_before = Path(my.cnf).read_bytes()
    env = {"HPADVISE_JOURNAL_DIR": str(tmp_path / "j")}
    (tmp_path / "root").mkdir()
    r = run_cli("apply", "--db", "postgres", "--db", "mysql", "--db", "jvm", "--profile", "jvm",
                "--instance", ipg["id"], "--instance", imy["id"], "--instance", ijv["id"],
                "--restart", "--yes", "--json", "--persist-root", str(tmp_path / "root"),
                env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert any("-XX:+UseLargePages" in n for n in out["notices"])
    pool = int(NR.read_text())
    assert need <= pool <= need + need // 50 + 1  # the sum, plus the profile's 1% headroom
    # the JVM cannot be changed while it runs: restart it with the flags apply printed
    jv.kill()
    jv.wait()
    jv2 = java("-XX:+UseLargePages", "-Xmx256m", "-Xms256m")
    assert "warning" not in jv2.first.lower(), jv2.first
    report, _ = check_json("--db", "postgres", "--db", "mysql", "--db", "jvm", "--profile", "jvm")
    for iid in (ipg["id"], imy["id"], f"jvm:{jv2.pid}"):
        i = _by(report, lambda x: x["id"] == iid)
        assert i["backing"] == "hugetlb", (iid, i["backing"])
    ours = {ipg["id"], imy["id"], f"jvm:{jv2.pid}"}
    assert not [f for f in report["findings"] if f["code"].endswith("fallback")
                and f["instance"] in ours]
    jv2.kill()
    jv2.wait()
    r = run_cli("rollback", "--yes", env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert Path(my.cnf).read_bytes() == cnf_before
    assert host_state(persist_root=str(tmp_path / "root")) == before
    report, _ = check_json("--db", "postgres", "--db", "mysql")
    assert _by(report, lambda x: x["id"] == ipg["id"])["backing"] == "4k"
    assert _by(report, lambda x: x["id"] == imy["id"])["backing"] == "4k"
