"""`hpadvise size`: PostgreSQL's count for planned settings equals what a real cluster with
those settings reports; MariaDB and a JVM started with the planned settings on exactly the
computed pool use every page and miss none; several engines give one plan; bad input is one
line; `report` over snapshots in different states sorts the worst first."""

import json
import time
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from hpadvise.facts.procs import parse_smaps
from support import run_cli

pytestmark = pytest.mark.integration


def size(*args, rc=0):
    r = run_cli("size", "--json", *args, timeout=180)
    assert r.returncode == rc, r.stderr
    d = json.loads(r.stdout)
    jsonschema.validate(d, json.loads((resources.files("hpadvise") / "schemas" / "size-schema.json")
                                      .read_text()))
    return d


def _used():
    m = {ln.split(":")[0]: int(ln.split()[1]) for ln in
         Path("/proc/meminfo").read_text().splitlines() if ln.startswith("HugePages_")}
    return m["HugePages_Total"] - m["HugePages_Free"] + m["HugePages_Rsvd"]


@pytest.mark.parametrize("settings", [
    {"shared_buffers": "256MB", "max_connections": "100"},
    {"shared_buffers": "1GB", "max_connections": "1000", "max_locks_per_transaction": "128"},
])
def test_postgres_count_is_postgres_own_for_the_same_settings(pg_factory, settings):
    d = size("postgres", *[f"{k}={v}" for k, v in settings.items()])
    [i] = d["instances"]
    assert i["demand"]["exact"] and "postgres -C" in i["demand"]["source"]
    c = pg_factory(settings)  # a real cluster with those settings
    for kb, hps in (("2048", "2MB"), ("1048576", "1GB")):
        own = int(c.postgres_C("shared_memory_size_in_huge_pages", "-c", f"huge_page_size={hps}"))
        assert i["demand"]["pages"][kb] == own, (kb, i["demand"]["pages"], own)
    # a page size asked for is kept (the plan does not move it to 1 GiB pages)
    d = size("postgres", *[f"{k}={v}" for k, v in settings.items()], "huge_page_size=2MB")
    assert [p["size_kb"] for p in d["pools"]] == [2048]


def test_mariadb_on_exactly_the_computed_pool(my_factory, knobs):
    planned = {"innodb_buffer_pool_size": "256M", "key_buffer_size": "64M",
               "aria_pagecache_buffer_size": "32M", "innodb_log_buffer_size": "8M"}
    d = size("mysql", *[f"{k}={v}" for k, v in planned.items()])
    [i] = d["instances"]
    n = i["demand"]["pages"]["2048"]
    assert "io_uring" in i["demand"]["source"]
    # named as the engines' tables name it: the product, then its release
    assert i["label"] == f"planned MariaDB {i['version']} (" + " ".join(
        f"{k}={v}" for k, v in planned.items()) + ")", i["label"]
    required = n - 3  # the allowance for io_uring's lazily mapped share (0-6 MiB)
    assert knobs.pool(2048, n) == n
    m = my_factory({k.replace("_", "-"): v for k, v in planned.items()} | {"large-pages": "ON"})
    m.start()
    time.sleep(1)
    maps = [mp for mp in parse_smaps(Path(f"/proc/{m.pid}/smaps").read_text()) if mp.hugetlb]
    mapped = sum(-(-mp.size_kb // 2048) for mp in maps)
    # io_uring maps any part of its share (seen: 204, 206 and 207 of 204 + 3)
    assert required <= mapped <= n, f"size said {n} ({required} required), mapped {mapped}"
    assert "continuing to smaller size" not in m.logtail()


def test_jvm_on_exactly_the_computed_pool(java, knobs):
    flags = ["-Xmx256m", "-Xms256m", "-XX:+UseLargePages"]
    d = size("jvm", "--", *flags)
    [i] = d["instances"]
    n = i["demand"]["pages"]["2048"]
    assert i["demand"]["exact"] and "G1" in i["demand"]["source"]
    assert i["label"] == f"planned JVM {i['version']} ({' '.join(flags)})", i["label"]
    assert knobs.pool(2048, n) == n
    q = java(*flags)
    assert "warning" not in q.first.lower(), q.first
    assert _used() == n, f"size said {n}, the JVM took {_used()}"


def test_several_engines_one_plan_and_a_verdict(knobs):
    knobs.pool(2048, 0)
    d = size("postgres", "shared_buffers=512MB", "+", "jvm", "-Xmx512m", "-XX:+UseLargePages")
    assert {i["engine"] for i in d["instances"]} == {"postgres", "jvm"}
    need = sum(i["demand"]["pages"]["2048"] for i in d["instances"])
    [pool] = [p for p in d["pools"] if p["size_kb"] == 2048]
    assert pool["pages"] >= need and pool["verdict"] == "fits"
    assert pool["how"] == f"vm.nr_hugepages = {pool['pages']}"
    total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    assert pool["left_for_os_bytes"] == total - pool["pages"] * 2 * 1024 * 1024
    # more than the host has: does not fit
    d = size("postgres", "shared_buffers=64GB", rc=1)  # exit 1: a pipeline stops on it
    assert {p["verdict"] for p in d["pools"]} == {"does not fit"}
    # two planned instances of one engine: an ID each, both in the pool (it raised
    # FrozenInstanceError, assigning the second ID to a frozen demand)
    d = size("postgres", "shared_buffers=64MB", "+", "postgres", "shared_buffers=128MB")
    ids = [i["id"] for i in d["instances"]]
    assert len(set(ids)) == 2 and [i["demand"]["instance"] for i in d["instances"]] == ids
    [pool] = [p for p in d["pools"] if p["size_kb"] == 2048]
    assert pool["pages"] >= sum(i["demand"]["pages"]["2048"] for i in d["instances"])


@pytest.mark.parametrize("args,needle", [
    (["oracle", "x=1"], "oracle"),
    (["postgres", "nosuch=1"], "nosuch"),
    (["postgres", "shared_buffers=lots"], "lots"),
    (["postgres", "shared_buffers=100TB"], "100TB"),
    (["postgres", "shared_buffers"], "NAME=VALUE"),
    (["postgres", "--server-version", "9"], "not installed"),
    (["mysql", "innodb_buffer_pool_size=lots"], "lots"),
    (["mysql", "nosuch=1"], "nosuch"),
    (["jvm", "--", "-XX:+NoSuchFlag"], "NoSuchFlag"),
    (["postgres", "+"], "give an engine"),
    (["postgres", "--root", "/nonexistent"], "/nonexistent"),
])
def test_bad_input(args, needle):
    r = run_cli("size", *args)
    assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_report_over_snapshots_in_different_states(hosts, tmp_path):
    r = run_cli("report", str(hosts / "pool-2m"), str(hosts / "pg-fallback"),
                str(hosts / "pg-hugetlb"), "--json", "--html", str(tmp_path / "fleet.html"))
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    by = {Path(x["source"]).name: x for x in rows}
    assert by["pg-fallback"]["fallbacks"] and by["pg-fallback"]["on_huge_pages"] == 0
    assert by["pg-hugetlb"]["on_huge_pages"] == 1
    assert by["pool-2m"]["pool"].startswith("short by") or "unused" in by["pool-2m"]["pool"]
    ranks = [(-{"crit": 3, "warn": 2, "info": 1, "ok": 0}[x["worst"]], -x["crit"], -x["warn"])
             for x in rows]
    assert ranks == sorted(ranks)  # worst first
    page = (tmp_path / "fleet.html").read_text()
    # what to do per host first, then the details: a header and a row per host in each
    assert page.count("<tr") == 2 * (len(rows) + 1) and "pg-fallback" in page
    assert page.index("to set") < page.index("Details")
    # a check --json output and a snapshot side by side
    out = run_cli("check", "--json", "--root", str(hosts / "thp-always"))
    (tmp_path / "db9.json").write_text(out.stdout)
    rows = json.loads(run_cli("report", str(tmp_path), str(hosts / "pool-1g"), "--json").stdout)
    assert {Path(x["source"]).name for x in rows} == {"db9.json", "pool-1g"}
    r = run_cli("report", str(tmp_path / "fleet.html"))
    assert r.returncode == 2 and "not a `hpadvise check --json` output" in r.stderr
