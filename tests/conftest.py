import os
import shutil
import subprocess
import sys
import tempfile
from collections import OrderedDict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostlock  # noqa: E402
from support import KernelKnobs, PgCluster, pg_bindir  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
import trees  # noqa: E402


_LIVE = {"used": False}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The tests hostlock.CONTAINED lists are marked `contained`; every other test owns the
    host (tests/hostlock.py)."""
    for item in items:
        if hostlock.contained(item.nodeid):
            item.add_marker(pytest.mark.contained)


_NICE = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A contained test run beside the host's tests, its module's fixtures and what it starts
    yield the CPUs to them (nice 10): theirs is the run's longest path."""
    if item.get_closest_marker("contained") and os.environ.get("PYTEST_XDIST_WORKER"):
        _NICE.setdefault("was", os.getpriority(os.PRIO_PROCESS, 0))
        os.setpriority(os.PRIO_PROCESS, 0, max(_NICE["was"], 10))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if "was" in _NICE and os.geteuid() == 0:  # only root may take its priority back
        os.setpriority(os.PRIO_PROCESS, 0, _NICE.pop("was"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduling by scope, with every test that owns the host in one scope: one
    worker runs them all, in file order (module fixtures once), while the contained tests go
    to whichever worker is free. The largest scope goes out first, so the host's tests start
    at once."""
    from xdist.scheduler import LoadScopeScheduling

    class HostInOneWorker(LoadScopeScheduling):
        ranked = False

        def _split_scope(self, nodeid: str) -> str:
            return hostlock.scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ranked:  # the units by hostlock.rank, in xdist's order within a rank
                self.workqueue = OrderedDict(sorted(self.workqueue.items(),
                                                    key=lambda unit: hostlock.rank(unit[0])))
                self.ranked = True
            super()._assign_work_unit(node)
    return HostInOneWorker(config, log)


@pytest.fixture(autouse=True)
def host_lock(request):
    """A test that owns the host holds its lock throughout and must leave it as found: pools,
    THP, cgroups, /etc/sysctl.d and mounts (checked after every other fixture's teardown, the
    knobs fixture's restore among them). A contained test takes no lock; run alone, it is held
    to the same account, so a contained test that changes the host fails."""
    contained = request.node.get_closest_marker("contained") is not None
    if contained and (os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get(hostlock.BESIDE)):
        yield  # the host's tests change it meanwhile, in another worker
        return
    if not (os.geteuid() == 0 and os.path.isdir("/run")):
        yield  # an unprivileged run changes nothing of the host's
        return
    with hostlock.Held():
        before = hostlock.state()
        try:
            yield
        finally:
            hostlock.release_memory()
        left = hostlock.changed(before, hostlock.state())
    if left:
        pytest.fail(("a contained test" if contained else "the test") + " left the host "
                    "changed: " + "; ".join(left), pytrace=False)


def owns_host(request, what: str) -> None:
    """The fixtures that change the host refuse a test marked contained."""
    if request.node.get_closest_marker("contained") is not None:
        pytest.fail(f"{request.node.nodeid} is marked contained but asks for {what}, which "
                    "changes the host: drop the mark", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def machine_left_as_found():
    """Whatever a test does, the session ends with every pool and THP knob as it began. Only a
    session that ran live tests restores: a unit-test session must not write back what it saw
    at its start over another session's (or a person's) changes made meanwhile."""
    k = KernelKnobs() if KernelKnobs.writable() else None
    yield
    if k and _LIVE["used"]:
        k.restore()


@pytest.fixture(autouse=True)
def own_journal(tmp_path, monkeypatch):
    """Every test journals (apply, capture, validate) into a directory of its own: a validate
    or capture a test kills leaves its journal active, and a later test's command would be
    refused over it (stacked.py); the host's /var/lib/hpadvise is never written."""
    monkeypatch.setenv("HPADVISE_JOURNAL_DIR", str(tmp_path / "journal"))


@pytest.fixture(scope="session")
def pyz(tmp_path_factory) -> Path:
    """hpadvise.pyz built from this checkout (scripts/build_pyz.py), once per run."""
    out = tmp_path_factory.mktemp("pyz") / "hpadvise.pyz"
    r = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "scripts"
                                            / "build_pyz.py"), str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


@pytest.fixture(scope="session")
def hosts(tmp_path_factory) -> Path:
    """Every captured host state as a full tree (base + overlay), built once per session."""
    return trees.build_all(tmp_path_factory.mktemp("hosts"))


@pytest.fixture
def knobs(request):
    """Live kernel knobs, restored in teardown whatever happens. Skips (with the reason) where
    the process is not root or the knobs are not writable."""
    owns_host(request, "knobs")
    if not KernelKnobs.writable():
        pytest.skip("live kernel test: needs root and writable /proc/sys/vm/nr_hugepages")
    _LIVE["used"] = True
    k = KernelKnobs()
    try:
        yield k
    finally:
        k.restore()


@pytest.fixture
def my_factory(request):
    """Throwaway MariaDB servers (never the system's service), destroyed in teardown."""
    owns_host(request, "my_factory")
    from hpadvise.plugins.mysql.validate.bench import ScratchMaria, maria_bindir
    if maria_bindir() is None:
        pytest.fail("MariaDB server binaries not found: run scripts/test.sh, which installs them")
    if os.geteuid() != 0:
        pytest.skip("integration: needs root (servers run as the mysql user)")
    made: list = []

    def make(settings=None, kind=None):
        """kind: a subclass of ScratchMaria that starts it another way (mysqld_safe)."""
        m = (kind or ScratchMaria)(settings)
        made.append(m)
        return m

    try:
        yield make
    finally:
        for m in made:
            m.destroy()


@pytest.fixture(scope="session")
def pg_template():
    """One initdb per PostgreSQL binary directory and run: a data directory (never started)
    that each fresh cluster is a copy of (a copy takes about half of an initdb's time here)."""
    base = tempfile.mkdtemp(prefix="hpadvise-test-templates-")
    os.chmod(base, 0o755)
    made: dict[str, PgCluster] = {}

    def of(bindir: str) -> PgCluster:
        if bindir not in made:
            made[bindir] = PgCluster(bindir=bindir, base=base)
        return made[bindir]

    try:
        yield of
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_factory(request, pg_template):
    """Throwaway PostgreSQL clusters (never the system's service), destroyed in teardown:
    each a copy of its major's template, with its own port, socket and settings."""
    from hpadvise.benchmarks.face import check_run
    owns_host(request, "pg_factory")
    if pg_bindir() is None:
        pytest.fail("PostgreSQL server binaries not found: run scripts/test.sh, which installs them")
    if os.geteuid() != 0 and os.environ.get("USER") != "postgres":
        pytest.skip("integration: needs root (clusters run as the postgres user)")
    made: list[PgCluster] = []

    def make(settings=None, bindir=None) -> PgCluster:
        tpl = pg_template(bindir or pg_bindir())
        c = PgCluster(bindir=tpl.bindir,
                      fill=lambda d: check_run(["cp", "-a", tpl.datadir, d]),
                      prepare=lambda c: c.configure({
                          "port": str(c.port), "unix_socket_directories": f"'{c.tmp}'",
                          "listen_addresses": "''", **(settings or {})}))
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.destroy()


JAVA_SRC = Path(__file__).resolve().parent / "fixtures" / "java" / "Idle.java"


@pytest.fixture(scope="session")
def classes(tmp_path_factory):
    """Idle.java compiled once: a JVM that touches 64 MiB of heap and waits."""
    if not shutil.which("javac"):
        pytest.fail("javac not found: run scripts/test.sh, which installs a JDK")
    d = tmp_path_factory.mktemp("java")
    os.chmod(d, 0o755)
    # --release 11: the class runs on every JDK the tests use (11 to 25)
    subprocess.run(["javac", "--release", "11", "-d", str(d), str(JAVA_SRC)], check=True)
    return d


@pytest.fixture
def java(request, classes):
    owns_host(request, "java")
    procs = []

    def start(*flags, env=None, user=None, binary="java"):
        kw = {}
        if user:
            import pwd
            pw = pwd.getpwnam(user)
            kw = dict(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
        p = subprocess.Popen([binary, *flags, "-cp", str(classes), "Idle"], cwd="/",
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, **(env or {})}, **kw)
        procs.append(p)
        before = []
        while True:  # the JVM's own notes and warnings come before our "ready"
            line = p.stdout.readline()
            assert line, "java exited: " + "".join(before)
            if line.startswith("ready"):
                break
            before.append(line)
        p.first = "".join(before)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()




@pytest.fixture
def root_lab(request):
    """Servers of newer releases in Debian roots of their own (tests/roots.py), destroyed in
    teardown whatever happens: make(engine, options, cls=RootServer, suite=None, **kw), in
    the engine's own suite's root unless `suite` names another."""
    owns_host(request, "root_lab")
    from pods import NoRuntime
    from roots import SUITE, RootServer, root_path, why_no_root
    if os.geteuid() != 0:
        pytest.fail("the roots lab needs root (namespaces, chroot, the roots' server users)")
    made = []

    def make(engine, options, cls=RootServer, suite=None, **kw):
        suite = suite or SUITE[engine]
        if root_path(suite) is None:
            pytest.skip(why_no_root(suite))
        try:
            s = cls(root_path(suite), engine, options, **kw)
        except NoRuntime as exc:
            pytest.fail(str(exc)) if "runc not found" in str(exc) else pytest.skip(str(exc))
        made.append(s)
        return s

    try:
        yield make
    finally:
        for s in reversed(made):
            s.destroy()


_TIMES: dict[str, float] = {}  # test file -> seconds (setup, call and teardown together)
_START: list[float] = []


def pytest_sessionstart(session):
    import time
    _START.append(time.monotonic())


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _TIMES[path] = _TIMES.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """Every run ends with its wall time and its ten slowest files: where the suite's time
    goes, seen at each run (lab/suite-time.md keeps the full account)."""
    import time
    if not _START or not _TIMES:
        return
    wall = time.monotonic() - _START[0]
    tr = terminalreporter
    tr.write_sep("-", f"suite wall time {wall / 60:.1f} min ({wall:.0f} s); slowest files")
    for path, s in sorted(_TIMES.items(), key=lambda kv: -kv[1])[:10]:
        tr.write_line(f"{s:8.1f} s  {path}")
