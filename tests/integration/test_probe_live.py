"""hpadvise probe on this host: 4 KiB pages cost more per random access than 2 MiB pages on a
working set far beyond the TLB's reach; the pools it takes and THP are as before afterwards;
an impossible size is refused in one line; the absent PMU is said plainly."""

import json

import pytest

from support import host_state, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]


def test_probe_orders_page_sizes_and_restores_the_host(knobs):
    before = host_state()
    r = run_cli("probe", "--size", "4GiB", "--accesses", "4000000", "--runs", "2", "--json",
                timeout=300)
    assert r.returncode == 0, r.stderr
    assert "probe: 4 KiB: run 1/2" in r.stderr  # progress
    d = json.loads(r.stdout)
    from importlib import resources

    import jsonschema
    jsonschema.validate(d, json.loads((resources.files("hpadvise") / "schemas" / "probe-schema.json")
                                      .read_text()))
    v = {x["name"]: x for x in d["variants"]}
    small = v["4 KiB"]["ns"]
    huge = [x["ns"] for x in d["variants"] if x["page_kb"] > 4 and x["ns"] is not None]
    assert small and huge, d["variants"]
    # The best huge page variant beats 4 KiB pages. Not every one, every time: on this VM
    # each variant is timed in its own stretch of the hypervisor's noise, and a guest's huge
    # page is only as good as the host memory behind it (measured the same afternoon: 4 KiB
    # 29.5 ns with 1 GiB pages at 70.9; then 4 KiB 41.9 with 2 MiB THP at 41.3; then 62.3
    # with THP at 20.8; the best huge variant was 30-65% faster each time).
    assert small > min(huge), (small, huge)
    assert v["2 MiB hugetlb"]["ns"] is not None, v["2 MiB hugetlb"]  # the pool was had
    assert d["saving_ns"] == pytest.approx(small - min(huge))
    assert 0 < d["bound"]["0.1"] < 0.1
    assert d["pmu"].startswith("no PMU in this VM")
    assert host_state() == before  # pools and THP given back


def test_probe_table_and_refusals():
    r = run_cli("probe", "--size", "1000GiB")
    assert r.returncode == 2 and "available" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run_cli("probe", "--size", "1MiB")
    assert r.returncode == 2 and "at least 64 MiB" in r.stderr
    r = run_cli("probe", "--size", "lots")
    assert r.returncode == 2 and "lots" in r.stderr


def test_a_killed_probe_leaves_its_pool_to_rollback(knobs, tmp_path):
    """probe journals the pools it grows: killed with one grown, it leaves it recorded,
    another probe over that pool is refused until `hpadvise rollback` gives it back; a whole
    probe closes its journal as rolled back."""
    from pathlib import Path
    pool = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
    knobs.pool(2048, 0)
    j = str(tmp_path / "journal")
    args = ("probe", "--size", "64MiB", "--accesses", "100000", "--runs", "1",
            "--journal-dir", j)
    r = run_cli(*args, env={"HPADVISE_TEST_KILL_AFTER": "1"}, timeout=300)
    assert r.returncode == -9, (r.returncode, r.stderr[-500:])
    assert int(pool.read_text()) > 0  # killed with the pool grown
    r = run_cli(*args, timeout=300)
    assert r.returncode == 2 and "hpadvise rollback" in r.stderr, r.stderr
    r = run_cli("rollback", "--yes", "--journal-dir", j)
    assert r.returncode == 0, r.stderr
    assert int(pool.read_text()) == 0
    r = run_cli(*args, timeout=300)
    assert r.returncode == 0, r.stderr
    h = json.loads(run_cli("history", "--json", "--journal-dir", j).stdout)
    assert [x["rolled_back"] is not None for x in h] == [True, True], h
