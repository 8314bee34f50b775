"""MariaDB on real throwaway servers: the page count is exact (a pool of exactly that many pages
is used to the last page with no fallback), the fallback with one page less is caught by
`check`, the offline estimate is never short, and apply/rollback go through the journal."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from hpadvise.plugins.mysql import conf as myconf
from hpadvise.plugins.mysql import sizing as mysizing
from hpadvise.facts.procs import parse_smaps
from support import check_json, run_cli

pytestmark = pytest.mark.integration

MATRIX = [
    # buffer pool, log buffer, key buffer, key cache segments, Aria page cache
    ("256M", "16M", "128M", "0", "128M"),
    ("1001M", "33M", "0", "0", "1M"),
    ("300M", "8M", "64M", "4", "32M"),
]


def _instance(report, datadir):
    for i in report["instances"]:
        if i["engine"] == "mysql" and os.path.realpath(
                i["settings"].get("data_directory", "").rstrip("/")) == os.path.realpath(datadir):
            return i
    raise AssertionError(f"no mysql instance for {datadir} in {[i['id'] for i in report['instances']]}")


def _meminfo():
    m = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        k, v = line.split(":", 1)
        m[k] = int(v.split()[0])
    return m


@pytest.mark.parametrize("bp,lb,kb,segs,aria", MATRIX)
def test_exact_pool_no_fallback_and_short_pool_caught(my_factory, knobs, bp, lb, kb, segs, aria):
    knobs.pool(2048, 0)
    m = my_factory({"innodb-buffer-pool-size": bp, "innodb-log-buffer-size": lb,
                    "key-buffer-size": kb, "key-cache-segments": segs,
                    "aria-pagecache-buffer-size": aria, "large-pages": "OFF"})
    m.start()
    report, r = check_json("--db", "mysql")
    assert r.returncode == 0, r.stderr
    i = _instance(report, m.datadir)
    d = i["demand"]
    assert d["exact"] and d["page_kb"] == 2048, d
    n = d["pages"]["2048"]
    assert any(f["code"] == "my.large_pages.off" for f in report["findings"]
               if f["instance"] == i["id"])
    # the estimate from the option files alone (no connection) is never short, and close
    settings = {k.replace("-", "_"): v for k, v in m.settings.items()}
    est = mysizing.pages_needed(mysizing.allocations(settings, "mariadb", mysizing.version_tuple(i["version"])), 2048)
    assert n <= est <= n + 2, (n, est)

    # io_uring maps 0-6 MiB more at some starts (innodb_use_native_aio): an allowance in n
    allowance = mysizing.AIO_ALLOWANCE // (2 << 20)
    assert "io_uring" in d["source"]
    required = n - allowance

    # exactly n pages: the server maps every required buffer on them and logs no fallback;
    # the pages it maps are the required ones and whatever io_uring took of its 0-6 MiB
    # share at this start (seen: none, 2 and 3 pages), never more than n.
    m.stop()
    assert knobs.pool(2048, n) == n
    m.configure({"large-pages": "ON"})
    m.start()
    time.sleep(1)  # io_uring's share is mapped lazily
    maps = [mp for mp in parse_smaps(Path(f"/proc/{m.pid}/smaps").read_text()) if mp.hugetlb]
    mapped = sum(-(-mp.size_kb // 2048) for mp in maps)
    assert required <= mapped <= n, f"computed {required} + {allowance}, mapped {mapped}: {maps}"
    mi = _meminfo()
    assert mi["HugePages_Total"] - mi["HugePages_Free"] + mi["HugePages_Rsvd"] == mapped
    assert not [ln for ln in m.logtail().splitlines() if myconf.FALLBACK_RE.search(ln)]
    report, r = check_json("--db", "mysql")
    i = _instance(report, m.datadir)
    assert i["backing"] == "hugetlb" and i["demand"]["pages"]["2048"] == n
    codes = {f["code"] for f in report["findings"] if f["instance"] == i["id"]}
    assert "my.large_pages.active" in codes and "my.large_pages.fallback" not in codes

    # one page short of the required buffers: it starts anyway, and check says so
    m.stop()
    assert knobs.pool(2048, required - 1) == required - 1
    m.start()
    report, r = check_json("--db", "mysql")
    i = _instance(report, m.datadir)
    fb = [f for f in report["findings"] if f["instance"] == i["id"]
          and f["code"] == "my.large_pages.fallback"]
    assert fb and fb[0]["severity"] == "crit", report["findings"]
    # InnoDB's own buffers fall back without a word in the log: smaps tells
    assert "smaps" in fb[0]["evidence"] or "smaller size" in fb[0]["evidence"]

    # no pages at all: the caches of mysys (key cache, Aria) log "continuing to smaller
    # size", and check quotes it; InnoDB's buffers fall back silently (smaps evidence)
    m.stop()
    knobs.pool(2048, 0)
    m.start()
    report, r = check_json("--db", "mysql")
    i = _instance(report, m.datadir)
    fb = [f for f in report["findings"] if f["instance"] == i["id"]
          and f["code"] == "my.large_pages.fallback"]
    assert fb, report["findings"]
    if aria != "1M":
        assert "continuing to smaller size" in fb[0]["evidence"], fb
    m.stop()


def _safe():
    """MariaDB started as mysqld_safe --defaults-file starts it: the wrapper script is the
    server's parent and starts it again when it dies; a clean shutdown ends both."""
    from hpadvise.plugins.mysql.validate.bench import ScratchMaria

    class Safe(ScratchMaria):
        @property
        def argv(self) -> list[str]:
            return ["mysqld_safe", f"--defaults-file={self.cnf}", f"--user={self.user}"]

        def stop(self) -> None:
            """The server, then its wrapper: mysqld_safe logs the server's end into the
            server's directory before it exits, and must be gone before that directory is
            removed (or it writes the directory anew). The wrapper apply started as well."""
            from hpadvise.benchmarks.face import wait_gone
            pid = self.pid
            wrapper = _parent(pid) if pid and "mysqld_safe" in _parent_cmdline(pid) else None
            super().stop()
            wait_gone(wrapper, 30)
    return Safe


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _parent_cmdline(pid: int) -> str:
    return Path(f"/proc/{_parent(pid)}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.parametrize("includedir,wrapper", [(False, False), (True, False), (False, True)],
                         ids=["cnf", "includedir", "mysqld_safe"])
def test_apply_restart_verify_rollback(my_factory, knobs, tmp_path, includedir, wrapper):
    knobs.pool(2048, 0)
    m = my_factory({"innodb-buffer-pool-size": "256M"}, kind=_safe() if wrapper else None)
    dropin = None
    if includedir:  # a server with an include directory gets a drop-in file of its own
        confd = Path(m.tmp) / "conf.d"
        confd.mkdir()
        (confd / "50-server.cnf").write_text("[mysqld]\nkey_buffer_size = 32M\n")
        with open(m.cnf, "a") as f:
            f.write(f"!includedir {confd}\n")
        dropin = confd / "99-hpadvise.cnf"
    m.start()
    first = m.pid
    assert not wrapper or "mysqld_safe" in _parent_cmdline(first)
    old_wrapper = _parent(first) if wrapper else None
    cnf_before = Path(m.cnf).read_bytes()
    env = {"HPADVISE_JOURNAL_DIR": str(tmp_path / "journal")}
    (tmp_path / "root").mkdir()
    r = run_cli("apply", "--db", "mysql", "--instance", m.datadir, "--restart", "--yes",
                "--persist-root", str(tmp_path / "root"), env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "large_pages" in r.stdout
    if dropin:
        assert "large_pages = ON" in dropin.read_text()
        assert Path(m.cnf).read_bytes() == cnf_before
    else:
        assert "large_pages = ON" in Path(m.cnf).read_text()
    report, _ = check_json("--db", "mysql")
    i = _instance(report, m.datadir)
    assert i["backing"] == "hugetlb" and i["pid"] not in (m.proc.pid, first)
    # restarted the way it was started: under a new wrapper of its own, the old one gone
    if wrapper:
        assert "mysqld_safe" in _parent_cmdline(i["pid"])
        assert old_wrapper == m.proc.pid and _parent(i["pid"]) != old_wrapper
        assert m.proc.poll() is not None  # the old wrapper ended with its server
    assert any(f["code"] == "my.large_pages.active" for f in report["findings"]
               if f["instance"] == i["id"])
    # a second apply finds nothing to do
    r2 = run_cli("apply", "--db", "mysql", "--instance", m.datadir, "--yes", "--persist-root",
                 str(tmp_path / "root"), env=env)
    assert r2.returncode == 0 and "Nothing to change" in r2.stdout, r2.stdout + r2.stderr
    r = run_cli("rollback", "--yes", env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert Path(m.cnf).read_bytes() == cnf_before
    assert dropin is None or not dropin.exists()
    assert m.ready()
    report, _ = check_json("--db", "mysql")
    i = _instance(report, m.datadir)
    assert i["backing"] == "4k"
    assert not wrapper or "mysqld_safe" in _parent_cmdline(i["pid"])
    assert int(Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text()) == 0
    hist = run_cli("history", env=env)
    assert "rolled back" in hist.stdout


def test_print_script_carries_the_option_and_the_restart_and_works(my_factory, knobs):
    """--print-script renders every action of the plan, the engine's too: the option file
    edit and the restart. Run by a root shell, it puts the server on huge pages."""
    knobs.pool(2048, 0)
    m = my_factory({"innodb-buffer-pool-size": "128M"})
    m.start()
    old_pid = m.pid
    r = run_cli("apply", "--db", "mysql", "--instance", m.datadir, "--restart",
                "--no-persist", "--print-script")
    assert r.returncode == 0, r.stderr
    script = r.stdout
    assert f"cat > {m.cnf} <<'HPADVISE_EOF'" in script and "large_pages = ON" in script
    assert f"kill -TERM {old_pid}" in script and f"--defaults-file={m.cnf}" in script
    assert "hugepages-2048kB/nr_hugepages" in script
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    assert "large_pages" not in Path(m.cnf).read_text()  # printing changed nothing
    r = subprocess.run(["sh", "-e"], input=script, text=True, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    report, _ = check_json("--db", "mysql")
    i = _instance(report, m.datadir)
    assert i["pid"] != old_pid and i["backing"] == "hugetlb", i
    assert not [f for f in report["findings"] if f["instance"] == i["id"]
                and f["code"] == "my.large_pages.fallback"]


def test_bad_option_files_and_credentials(my_factory):
    m = my_factory()
    m.start()
    good = Path(m.cnf).read_text()
    try:
        Path(m.cnf).write_text(good.replace("[mysqld]", "[mysqld"))
        r = run_cli("check", "--db", "mysql")
        assert r.returncode == 2
        err = [ln for ln in r.stderr.splitlines() if ln.startswith("hpadvise: error")]
        assert len(err) == 1 and f"{m.cnf}:1" in err[0] and "group" in err[0], r.stderr
        Path(m.cnf).write_text(good + f"!include {m.cnf}\n")
        r = run_cli("check", "--db", "mysql")
        assert r.returncode == 2 and "include loop" in r.stderr, r.stderr
    finally:
        Path(m.cnf).write_text(good)
    r = run_cli("check", "--db", "mysql", "--dsn", f"mysql://root:hunter2@127.0.0.1:{m.port}/")
    assert r.returncode == 2
    assert "cannot connect" in r.stderr and "hunter2" not in r.stdout + r.stderr
    r = run_cli("check", "--db", "mysql", "--json", "--dsn",
                f"mysql://root:hunter2@127.0.0.1:{m.port}/")
    assert "hunter2" not in r.stdout and json.loads(r.stdout)["instances"]


def test_pending_option_change_is_seen(my_factory):
    """An option file edited after the start: check warns, and the plan follows the file."""
    m = my_factory()
    m.start()
    with open(m.cnf, "a") as f:
        f.write("large-pages\ninnodb_buffer_pool_size = 256M\n")
    report, r = check_json("--db", "mysql")
    i = _instance(report, m.datadir)
    pend = [f for f in report["findings"] if f["instance"] == i["id"]
            and f["code"] == "my.pending_restart"]
    assert pend and "large_pages" in pend[0]["evidence"] and \
        "innodb_buffer_pool_size" in pend[0]["evidence"], report["findings"]
    assert not [c for c in report["plan"]["changes"] if c["target"] == "large_pages"
                and c.get("instance") == i["id"]]


def test_client_library_and_connector_read_the_same(my_factory, monkeypatch):
    """check talks to MariaDB through the host's client library (libmariadb here), and through
    mysql-connector where none is installed: on a real server both return the same rows for
    every statement check sends, NULL as None, and the same sizing."""
    from hpadvise.planning.pipeline import inspect
    from hpadvise.plugins.mysql import client
    from hpadvise.facts.sysroot import SysRoot
    m = my_factory({"key-cache-segments": "2", "large-pages": "OFF"})
    m.start()
    statements = ["SHOW GLOBAL VARIABLES", "SELECT CURRENT_USER()",
                  "SELECT ENGINE FROM information_schema.ENGINES",
                  "SELECT SEGMENT_NUMBER, USED_BLOCKS + UNUSED_BLOCKS FROM "
                  "information_schema.KEY_CACHES", "SHOW GLOBAL STATUS LIKE 'Aria_pagecache%'",
                  "SELECT NULL, 1, 'x'"]
    seen = {}
    for native in (True, False):
        with client.Connection(5, native=native, unix_socket=m.socket, user="root") as c:
            seen[c.via] = [c.execute(q) for q in statements]
    assert set(seen) == {"client library", "mysql-connector"}
    lib, conn = seen["client library"], seen["mysql-connector"]
    volatile = {"timestamp", "gtid_binlog_pos", "gtid_current_pos"}
    assert [r for r in lib[0] if r[0] not in volatile] == [r for r in conn[0]
                                                         if r[0] not in volatile]
    assert lib[1:] == conn[1:] and lib[-1] == [(None, "1", "x")]
    assert len(lib[3]) == 3  # the two key cache segments and their total
    with pytest.raises(client.ClientError, match="socket"):
        client.Connection(2, unix_socket=f"{m.tmp}/no-such.sock", user="root")

    def demand():
        r = inspect(SysRoot("/"), "oltp", engine_names=["mysql"])
        [i] = [i for i in r.instances if os.path.realpath(
            i.settings.get("data_directory", "").rstrip("/")) == os.path.realpath(m.datadir)]
        return i.demand
    native = demand()
    monkeypatch.setattr(client, "_lib", None)  # as on a host without a client library
    assert demand() == native and native.exact


def test_size_max_above_size_is_no_bigger_pool(my_factory, knobs):
    """innodb_buffer_pool_size_max above innodb_buffer_pool_size (MariaDB's one-mapping pool):
    without large pages the server keeps it (1 GiB of room to grow); with them it maps only the
    pool rounded up to 8 MiB, so check's count, made while the server runs without large
    pages, is what it takes with them (not a 1 GiB pool), and the pool's size is then fixed
    until a restart (SET GLOBAL fails), which the plan's reason says."""
    knobs.pool(2048, 0)
    m = my_factory({"innodb-buffer-pool-size": "300M", "innodb-buffer-pool-size-max": "1G",
                    "innodb-log-buffer-size": "8M", "key-buffer-size": "0",
                    "aria-pagecache-buffer-size": "1M", "large-pages": "OFF"})
    m.start()

    def query(sql):
        return subprocess.run(["mariadb", "-S", m.socket, "-uroot", "-N", "-e", sql],
                              capture_output=True, text=True)
    assert query("SELECT @@innodb_buffer_pool_size_max").stdout.split() == [str(1 << 30)]
    report, r = check_json("--db", "mysql")
    i = _instance(report, m.datadir)
    n = i["demand"]["pages"]["2048"]
    required = n - mysizing.AIO_ALLOWANCE // (2 << 20)
    assert required == 152 + 4 + 4, i["demand"]  # 304 MiB of pool, two log buffers of 8 MiB
    [ch] = [c for c in report["plan"]["changes"] if c["target"] == "large_pages"
            and c.get("instance") == i["id"]]
    assert "no online resize" in ch["reason"]
    m.stop()
    assert knobs.pool(2048, n) == n
    m.configure({"large-pages": "ON"})
    m.start()
    time.sleep(1)
    maps = [mp for mp in parse_smaps(Path(f"/proc/{m.pid}/smaps").read_text()) if mp.hugetlb]
    mapped = sum(-(-mp.size_kb // 2048) for mp in maps)
    assert required <= mapped <= n, [mp.size_kb for mp in maps]
    assert query("SELECT @@innodb_buffer_pool_size_max").stdout.split() == [str(304 << 20)]
    grow = query("SET GLOBAL innodb_buffer_pool_size = 512 * 1048576")
    assert grow.returncode != 0 and "read-only" in grow.stderr, grow
    report, r = check_json("--db", "mysql")
    codes = {f["code"] for f in report["findings"] if f["instance"] == i["id"]}
    assert "my.large_pages.active" in codes and "my.large_pages.fallback" not in codes
