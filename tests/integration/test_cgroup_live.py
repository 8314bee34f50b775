"""hugetlb cgroup limits on real cgroups with real servers: check predicts the SIGBUS before
any load and the load then produces it; a reservation limit below the need makes the start fall
back or fail, as predicted; adequate limits give no finding. cgroup v2 (the hybrid hierarchy
this host mounts at /sys/fs/cgroup/unified) and a v1 hugetlb hierarchy mounted for the test.
Teardown stops the servers, removes the cgroups, puts the parent's subtree_control back and
unmounts, whatever happens."""

import subprocess
import time
from pathlib import Path

import pytest

from support import Cgroup, NoCgroup, check_json, instance

pytestmark = pytest.mark.integration
MiB = 1 << 20


@pytest.fixture
def cgroup(knobs):
    made = []

    def make(version=2):
        try:
            c = Cgroup(version)
        except NoCgroup as exc:
            pytest.skip(str(exc))
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in reversed(made):
            c.remove()


@pytest.fixture
def limited(cgroup, knobs, pg_factory):
    """A 128 MB PostgreSQL (not started) and a fresh hugetlb cgroup with these limits, over a
    200-page 2 MiB pool."""
    def make(fault, rsvd, huge_pages, version=2):
        knobs.pool(2048, 200)
        cg = cgroup(version)
        cg.limit(fault=fault, rsvd=rsvd)
        return cg, pg_factory({"shared_buffers": "128MB", "huge_pages": huge_pages})
    return make


def checked(c):
    """check's report and the instance of cluster c in it."""
    report, _ = check_json("--db", "postgres")
    return report, instance(report, c.datadir)


def start_in(cg, c, check=True):
    r = cg.run_in(f"runuser -u postgres -- {c.bindir}/pg_ctl -D {c.datadir} -l {c.log} -w "
                  "-t 60 start", cwd="/")
    assert not check or r.returncode == 0, r.stderr + c.logtail()
    return r


def findings(report, iid):
    return {f["code"]: f for f in report["findings"] if f["instance"] == iid}


def test_fault_limit_below_need_is_a_predicted_sigbus_that_load_produces(limited):
    cg, c = limited(fault=20 * MiB, rsvd=None, huge_pages="try")
    start_in(cg, c)
    report, i = checked(c)
    assert i["backing"] == "hugetlb"  # it started on huge pages: the mapping was not capped
    need = i["demand"]["pages"]["2048"] * 2 * MiB
    f = findings(report, i["id"])["cgroup.hugetlb.sigbus"]
    assert f["severity"] == "crit" and cg.name in f["title"]
    assert f"needs {need} bytes" in f["evidence"] and f"{cg.path}/hugetlb.2MB.max = " \
        f"{20 * MiB}" in f["evidence"] and "rsvd.max = max" in f["evidence"]
    changes = {(ch["target"], ch["recommended"]) for ch in report["plan"]["changes"]
               if ch["instance"] == i["id"]}
    assert changes == {("huge_pages", "off")}  # never huge_pages = on here
    assert i["id"] not in [x for p in report["plan"]["pools"] for x in p["instances"]]
    # its pages are reserved, few of them faulted yet: they are not "used by nothing"
    # (the system's own servers may have planned pages in the pool too: at most the rest)
    unused = [int(f["title"].split()[0]) for f in report["findings"]
              if f["code"] == "pool.unused"]
    assert all(n <= 200 - need // (2 * MiB) for n in unused), unused
    # the load touches the buffers past the fault limit: SIGBUS, as predicted
    subprocess.run(["runuser", "-u", "postgres", "--", f"{c.bindir}/psql", "-h", c.tmp, "-p",
                    str(c.port), "-d", "postgres", "-c",
                    "CREATE TABLE big AS SELECT g, repeat('x', 200) AS pad "
                    "FROM generate_series(1, 300000) g"], capture_output=True, cwd="/")
    deadline = time.time() + 30
    while "signal 7" not in Path(c.log).read_text() and time.time() < deadline:
        time.sleep(0.2)
    assert "terminated by signal 7: Bus error" in Path(c.log).read_text()
    assert cg.events() >= 1
    report, _ = check_json("--db", "postgres")
    hit = [f for f in report["findings"] if f["code"] == "cgroup.hugetlb.hit"]
    assert hit and hit[0]["severity"] == "crit", report["findings"]


def test_reservation_limit_below_need_refuses_or_falls_back(limited, knobs):
    cg, c = limited(fault=20 * MiB, rsvd=20 * MiB, huge_pages="on")
    r = start_in(cg, c, check=False)
    assert r.returncode != 0 and "could not map anonymous shared memory" in c.logtail()
    c.configure({"huge_pages": "try"})
    start_in(cg, c)
    report, i = checked(c)
    assert i["backing"] == "4k"  # the reservation failed cleanly: normal pages
    f = findings(report, i["id"])["cgroup.hugetlb.reserve_short"]
    assert f"{cg.path}/hugetlb.2MB.rsvd.max = {20 * MiB}" in f["evidence"]
    assert {(ch["target"], ch["recommended"]) for ch in report["plan"]["changes"]
            if ch["instance"] == i["id"]} == {("huge_pages", "off")}
    # A restart that came back on 4 KiB pages is diagnosed in one line, every cause found:
    # the setting and its file, the pool short of pages (shrunk to 10 here), the cgroup.
    from hpadvise.plugins.postgres.actions import diagnose
    need = i["demand"]["pages"]["2048"]
    assert need > 10
    pages = knobs.pool(2048, 10)
    why = diagnose({"socket_dir": c.tmp, "port": c.port, "owner": "postgres",
                    "bindir": c.bindir}, c.pid)
    line = [ln for ln in Path(c.datadir, "postgresql.conf").read_text().splitlines()]
    at = max(n for n, ln in enumerate(line, 1) if ln.startswith("huge_pages"))
    assert why == (f"huge_pages is try (from {c.datadir}/postgresql.conf:{at}), which outranks "
                   f"the change; the 2 MiB pool had {pages} free pages unreserved, {need} "
                   f"needed (others hold 0); its cgroup /{cg.name} caps the 2MB huge pages' "
                   f"reservations at 20 MiB, below the {2 * need} MiB it needs"), why


def test_adequate_limits_run_on_huge_pages_without_a_finding(limited):
    cg, c = limited(fault=400 * MiB, rsvd=400 * MiB, huge_pages="on")
    start_in(cg, c)
    c.psql("CREATE TABLE big AS SELECT g, repeat('x', 200) AS pad "
           "FROM generate_series(1, 300000) g")
    report, i = checked(c)
    assert i["backing"] == "hugetlb"
    assert not [code for code in findings(report, i["id"]) if code.startswith("cgroup.")]
    assert cg.events() == 0


def test_cgroup_v1_hierarchy(limited):
    cg, c = limited(fault=20 * MiB, rsvd=None, huge_pages="try", version=1)
    start_in(cg, c)
    report, i = checked(c)
    f = findings(report, i["id"])["cgroup.hugetlb.sigbus"]
    assert f"{cg.path}/hugetlb.2MB.limit_in_bytes = {20 * MiB}" in f["evidence"]


def test_jvm_under_a_fault_limit_and_an_adequate_one(cgroup, knobs, classes, tmp_path):
    knobs.pool(2048, 400)
    # (a) Touching its heap up front, a JVM dies of SIGBUS in its heap at start.
    small = cgroup(2)
    small.limit(fault=20 * MiB, rsvd=None)
    r = small.run_in(f"java -XX:+UseLargePages -XX:+AlwaysPreTouch -Xms256m -Xmx256m -cp "
                     f"{classes} Idle", timeout=120, cwd=tmp_path)
    assert r.returncode != 0 and "SIGBUS" in r.stdout, (r.returncode, r.stdout[-500:])
    assert small.events() >= 1
    # (c) Under adequate limits it runs on huge pages and check has nothing to say ...
    big = cgroup(2)
    big.limit(fault=600 * MiB, rsvd=600 * MiB)
    p = subprocess.Popen(["sh", "-c", f"echo $$ > {big.path}/cgroup.procs && exec java "
                          f"-XX:+UseLargePages -Xms256m -Xmx256m -cp {classes} Idle"],
                         stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert p.stdout.readline().startswith("ready")
        report, _ = check_json("--db", "jvm")
        [i] = [x for x in report["instances"] if x["pid"] == p.pid]
        assert i["backing"] == "hugetlb"
        assert not [code for code in findings(report, i["id"]) if code.startswith("cgroup.")]
        # ... and with the fault limit lowered below its need, check predicts the crash.
        used = int((big.path / "hugetlb.2MB.current").read_text())
        (big.path / "hugetlb.2MB.max").write_text(str(used + 2 * MiB))
        report, _ = check_json("--db", "jvm")
        f = findings(report, i["id"])["cgroup.hugetlb.sigbus"]
        assert f"hugetlb.2MB.max = {used + 2 * MiB}" in f["evidence"]
        assert {(ch["target"], ch["recommended"]) for ch in report["plan"]["changes"]
                if ch["instance"] == i["id"]} == {("java options", "-XX:-UseLargePages")}
    finally:
        p.kill()
        p.wait()


def test_inside_a_container_it_says_so_and_reads_its_own_limits(cgroup, knobs, pg_factory):
    """A container as the kernel makes one: a hugetlb cgroup with a limit, and PID and mount
    namespaces of its own with their own /proc (unshare(1)), hpadvise started inside."""
    import json
    import shlex
    import sys
    knobs.pool(2048, 16)
    cg = cgroup(2)
    cg.limit(fault=20 * MiB, rsvd=10 * MiB)
    c = pg_factory({"shared_buffers": "64MB"})
    c.start()  # on the host: check on the host sees it, check in the container must not
    outside, _ = check_json("--db", "postgres")
    assert not outside["host"]["in_container"]
    instance(outside, c.datadir)
    r = cg.run_in("unshare --pid --fork --mount-proc " + shlex.join(
        [sys.executable, "-m", "hpadvise.cli", "check", "--json", "--db", "postgres"]),
        timeout=120)
    inside = json.loads(r.stdout)
    h = inside["host"]
    assert h["in_container"] and "own PID namespace" in h["container_evidence"][0]
    [own] = [x for x in h["cgroup_hugetlb"] if x["size"] == "2MB"]
    assert (own["limit_bytes"], own["rsvd_limit_bytes"]) == (20 * MiB, 10 * MiB)
    assert own["cgroup"] == f"/{cg.name}"
    assert c.datadir not in json.dumps(inside["instances"])  # out of its sight, and it says so
    [f] = [f for f in inside["findings"] if f["code"] == "host.container"]
    assert "faults 20 MiB, reservations 10 MiB" in f["rationale"]
    assert h["pools"] == outside["host"]["pools"]  # the host's pools, as the container sees them


def test_limit_zero_in_a_container_predicts_the_crash_before_the_first_start(limited):
    """A container as the kubelet makes one for a pod that requested no 2 MiB pages: its
    cgroup's hugetlb.2MB.max is 0, reservations unlimited (runc before 1.2 sets the fault
    limit only), and a free pool on the host. `check --pgdata` run inside it (its own cgroup,
    PID and mount namespaces, cgroup2 mounted as the namespace shows it) predicts the crash
    of a cluster that has not started yet and plans it off huge pages; starting it there with
    huge_pages = try then dies of SIGBUS, as predicted."""
    import json
    import shlex
    import sys
    cg, c = limited(fault=0, rsvd=None, huge_pages="try")
    mnt = cg.root
    inner = (f"umount -l {mnt} && mount -t cgroup2 none {mnt} && exec "
             + shlex.join([sys.executable, "-m", "hpadvise.cli", "check", "--json",
                           "--db", "postgres", "--pgdata", c.datadir]))
    r = cg.run_in("unshare --cgroup --mount --pid --fork --mount-proc sh -c "
                  + shlex.quote(inner), timeout=120)
    inside = json.loads(r.stdout)
    assert inside["host"]["in_container"] and inside["host"]["cgroup_hidden"] == [mnt]
    i = instance(inside, c.datadir)
    assert not i["running"] and i["cgroup_from"] == "hpadvise"
    f = findings(inside, i["id"])["cgroup.hugetlb.sigbus"]
    assert f["severity"] == "crit" and "at its first start" in f["title"]
    assert f"{mnt}/hugetlb.2MB.max = 0" in f["evidence"]
    changes = {(ch["target"], ch["recommended"]) for ch in inside["plan"]["changes"]
               if ch["instance"] == i["id"]}
    assert changes == {("huge_pages", "off")}
    # as predicted: the first start in that cgroup dies of SIGBUS
    events = cg.events()
    r = start_in(cg, c, check=False)
    assert r.returncode != 0 and cg.events() > events
