"""The MySQL/MariaDB release rules (versions.py) and what sizing and the findings make of them,
on settings as servers of each release report them. MySQL cannot be installed here: its rules
are modelled from its source and manual, and these tests check the model's arithmetic and that
the output says it is a model; the error log lines follow the message texts in MySQL's source
(large_page_alloc-linux.h), without the log's time stamp and code prefix."""

import pytest

from hpadvise.facts import host
from hpadvise.api import profiles
from hpadvise.api.engines import Demand, Instance, registry
from hpadvise.plugins import mysql as my
from hpadvise.plugins.mysql import sizing as mysizing
from hpadvise.plugins.mysql import versions
from hpadvise.plugins.mysql.state import Server
from hpadvise.facts.procs import Mapping
from hpadvise.facts.sysroot import SysRoot

MiB = 1 << 20


def _releases():
    for major, minors in ((5, (7,)), (8, (0, 4)), (10, (3, 4, 5, 6, 8, 11)), (11, range(0, 10)),
                          (12, (0, 3))):
        for minor in minors:
            for patch in range(0, 25):
                yield major, minor, patch


@pytest.mark.parametrize("flavour", ["mariadb", "mysql"])
def test_every_release_has_exactly_one_pool_layout_and_one_allocation_call(flavour):
    for v in _releases():
        m = versions.model(flavour, v)
        assert m.has("chunks") != m.has("single_pool"), (flavour, v)
        if flavour == "mariadb":
            assert m.has("sysv") != m.has("mmap"), v
            assert not (m.has("log_buffers") and m.has("log_buffers_old")), v


def test_rules_are_sourced_and_spans_well_formed():
    keys = set()
    for r in versions.RULES:
        assert r.source and r.says and r.spans, r.key
        assert all(lo < hi for lo, hi in r.spans), r.key
        keys.add((r.flavour, r.key))
    assert len(keys) == len(versions.RULES)  # one rule per fact and flavour


def test_mariadb_releases():
    m = versions.model("mariadb", (10, 11, 19))  # the one measured here
    assert m.single_pool and m.has("log_buffers") and m.has("io_uring") and m.measured
    assert m.summary() == "MariaDB 10.11.19: rules measured on this release here"
    assert "measured here on MariaDB 10.11.19" in versions.model("mariadb", (11, 8, 3)).summary()
    before = versions.model("mariadb", (10, 11, 11))  # chunks, autosized
    assert before.has("chunks") and before.has("chunk_autosize") and not before.measured
    assert "not measured here" in before.summary()
    assert before.chunk_default(8 << 30, 2 * MiB) == 128 * MiB
    assert before.chunk_default(100 * MiB, 2 * MiB) == 1 * MiB  # 1.56 MiB rounds down to 0
    lts = versions.model("mariadb", (10, 6, 20))
    assert lts.has("chunks") and not lts.has("chunk_autosize") and lts.has("log_buffers_old")
    assert lts.chunk_default(8 << 30, 2 * MiB) == 128 * MiB
    assert versions.model("mariadb", (10, 4, 34)).sysv
    assert versions.model("mariadb", (11, 4, 6)).single_pool
    assert not versions.model("mariadb", (11, 4, 5)).single_pool
    assert versions.model("mariadb", (11, 8, 2)).single_pool


def test_mysql_releases():
    m80 = versions.model("mysql", (8, 0, 36))
    assert m80.has("chunks") and m80.has("default_size") and not m80.sysv
    assert m80.chunk_header == 4096 and not m80.measured
    assert "modelled from the server's source and manual, not measured here" in m80.summary()
    assert m80.instances(8 << 30, 128 * MiB, 16) == 8 and m80.instances(512 * MiB, 128 * MiB, 16) == 1
    m84 = versions.model("mysql", (8, 4, 3))
    assert m84.instances(1 << 30, 128 * MiB, 64) == 1
    assert m84.instances(8 << 30, 128 * MiB, 8) == 2      # a quarter of 8 CPUs
    assert m84.instances(2 << 30, 128 * MiB, 64) == 8     # (16 chunks) / 2
    m57 = versions.model("mysql", (5, 7, 44))
    assert m57.sysv and m57.chunk_header == 0


def test_mysql_chunks_each_a_mapping_with_its_header():
    s = {"innodb_buffer_pool_size": "8G", "key_buffer_size": "0"}
    allocs = mysizing.allocations(s, "mysql", (8, 0, 36))
    chunks = [a for a in allocs if a.chunk]
    # 8 instances by default at 8 GiB, 128 MiB chunks: 64 mappings of chunk + descriptors
    # (8192 blocks x 504 B measured bound, in 16 KiB pages) + the 4 KiB header: 66 pages of
    # 2 MiB each, as 9.7.4 maps them (132 MiB a chunk)
    desc = -(-8192 * 504 // 16384) * 16384
    assert len(chunks) == 64 and all(a.bytes == 128 * MiB + desc + 4096 and not a.exact
                                     for a in chunks)
    assert mysizing.pages_needed(allocs, 2048) == 64 * 66
    # the key cache is not on large pages since 8.0 (my_malloc): not in the demand
    with_kc = mysizing.allocations({**s, "key_buffer_size": "64M"}, "mysql", (8, 0, 36))
    assert not [a for a in with_kc if "key cache" in a.what]
    assert [a for a in mysizing.allocations({**s, "key_buffer_size": "64M"}, "mysql",
                                            (5, 7, 44)) if "key cache" in a.what]
    assert not any("log buffer" in a.what or "io_uring" in a.what for a in allocs)
    # 8.4's default instances: with 8 CPUs 2 instances, the same 64 chunks
    a84 = mysizing.allocations(s, "mysql", (8, 4, 3), cpus=8)
    assert len([a for a in a84 if a.chunk]) == 64
    # a pool that is not a multiple of chunk x instances is rounded up (MySQL manual)
    odd = mysizing.allocations({"innodb_buffer_pool_size": "9000M", "key_buffer_size": "0"},
                               "mysql", (8, 0, 36))
    assert len([a for a in odd if a.chunk]) == 72
    # MySQL's own key cache default (8 MiB) on large pages before 8.0 only, none of MariaDB's
    # Aria cache
    assert [a.what for a in mysizing.allocations({}, "mysql", (5, 7, 44)) if not a.chunk] \
        == ["key cache"]
    assert [a.what for a in mysizing.allocations({}, "mysql", (8, 0, 36)) if not a.chunk] == []
    assert "InnoDB buffer pool 64 chunk mappings of 132 MiB" in mysizing.describe(allocs)


def test_mariadb_chunks_before_the_single_pool():
    s = {"innodb_buffer_pool_size": "4G", "innodb_buffer_pool_instances": "8"}
    allocs = mysizing.allocations(s, "mariadb", (10, 11, 11))
    chunks = [a for a in allocs if a.chunk]
    # one instance whatever the setting (10.5+); chunk autosized to 4G / 64 = 64 MiB
    assert len(chunks) == 64 and chunks[0].chunk == 64 * MiB
    assert all(a.bytes == 66 * MiB for a in chunks)  # + 4096 blocks x 512 B, no header
    one = mysizing.allocations(s, "mariadb", (10, 11, 19))
    assert [a.what for a in one if a.what.startswith("InnoDB buffer pool")] == ["InnoDB buffer pool"]


def _server(version, flavour, huge_sizes, log, settings=None):
    s = Server(pid=4242, flavour=flavour, version=version,
               settings={"large_pages": "ON", "innodb_buffer_pool_size": "1G",
                         "key_buffer_size": "0", **(settings or {})})
    s.allocations = mysizing.allocations(s.settings, flavour, s.vt)
    s.required_pages = mysizing.pages_needed(s.allocations, 2048)
    s.huge_maps = [Mapping(0, kb * 1024, "rw-p", "/anon_hugepage (deleted)", kb, 2048, kb, 0, 0,
                           0, kb) for kb in huge_sizes]
    s.fallback = log
    i = Instance("mysql", "mysql:3306", "x", True, pid=4242, version=version, state=s)
    i.backing, i.backing_page_kb = ("hugetlb", 2048) if huge_sizes else ("4k", 4)
    i.demand = Demand(i.id, None, 2048, {2048: s.required_pages}, False, "t")
    return i


@pytest.fixture
def judge(hosts):
    facts = host.collect(SysRoot(hosts / "no-pools"))
    prof = profiles.load("oltp", registry.profile_schemas())
    eng = my.MySQLEngine()
    return lambda inst: {f.code: f for f in eng.findings(inst, facts, prof)}


def test_mysql_partial_fallback_names_the_chunks(judge):
    # 1 GiB on MySQL 8.0: one instance, 8 chunks of 128 MiB, each mapped (or not) alone
    chunk_kb = 66 * 2048
    warn = "[Warning] [InnoDB] large_page_aligned_alloc mmap(138412032 bytes) failed; errno 12"
    f = judge(_server("8.0.36", "mysql", [chunk_kb] * 5, [warn] * 3))
    fb = f["my.large_pages.fallback"]
    assert fb.title == "3 of 8 buffer pool chunks fell back to 4 KiB pages", fb.title
    assert "5 chunk mappings on huge pages of 8" in fb.evidence
    assert "error log: 3 chunk-sized" in fb.evidence
    # every chunk on huge pages: no fallback
    f = judge(_server("8.0.36", "mysql", [chunk_kb] * 8, []))
    assert "my.large_pages.fallback" not in f and "my.large_pages.active" in f
    # the MariaDB single pool has no chunks to count: the finding keeps its general title
    f = judge(_server("10.11.19-MariaDB", "mariadb", [], ["Couldn't allocate 2097152 bytes "
              "(Large/HugeTLB memory page size 2097152); errno 12; continuing to smaller size"]))
    assert f["my.large_pages.fallback"].title == "large_pages = ON fell back to normal pages"


def test_sysv_for_the_releases_and_buffers_that_use_it(judge):
    # MySQL's key cache went through SysV shared memory before 8.0; since, it is not on
    # large pages at all
    f = judge(_server("5.7.44", "mysql", [], [], {"key_buffer_size": "64M"}))
    assert "large pages" in f["my.sysv_shm"].rationale
    assert "my.sysv_shm" not in judge(_server("8.0.36", "mysql", [66 * 2048] * 8, [],
                                              {"key_buffer_size": "64M"}))
    assert "my.sysv_shm" not in judge(_server("8.0.36", "mysql", [67 * 2048] * 8, []))
    assert "my.sysv_shm" not in judge(_server("10.11.19-MariaDB", "mariadb", [520 * 2048], [],
                                              {"key_buffer_size": "64M"}))
    # whatever the version says, SysV segments in the server's mappings are SysV
    i = _server("8.0.11", "mysql", [], [])
    i.state.huge_maps = [Mapping(0, 1, "rw-s", "/SYSV00000000 (deleted)", 135168, 2048, 0, 0, 0,
                                 135168, 0) for _ in range(8)]
    assert "8 SysV huge page segments" in judge(i)["my.sysv_shm"].evidence


def test_reference_lists_every_rule():
    from pathlib import Path
    text = Path(__file__).resolve().parents[2].joinpath("docs", "reference.md").read_text()
    for r in versions.RULES:
        assert f"`{r.key}`: {r.says}" in text, r.key
