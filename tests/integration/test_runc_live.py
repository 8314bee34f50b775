"""Containers under a real runtime (Debian's runc), in the cgroup tree a kubelet builds: the
kubelet's limit 0 for an unrequested page size, applied by runc, predicted as the crash it is
from inside before the server's first start; a pod-level limit below the need, found from the
host with the pod and container named, then produced by a load, for PostgreSQL and for a JVM;
from inside, the limits above are out of sight and said so. Teardown deletes the container, the pod's cgroups and the pools
whatever happens (tests/pods.py); the pod goes before the clusters, whose servers ran in it."""

import json
import pwd
import re
import subprocess
import time
from pathlib import Path

import pytest

from pods import NoRuntime, Pod
from support import check_json, instance

pytestmark = [pytest.mark.integration, pytest.mark.live]
MiB = 1 << 20


@pytest.fixture
def pod(knobs):
    made = []

    def make(pod_limit, container_limit, cluster=None, readonly=()):
        try:
            p = Pod(pod_limit, container_limit, [cluster.tmp] if cluster else [],
                    (cluster.datadir,) if cluster else (), tuple(readonly))
        except NoRuntime as exc:
            pytest.fail(str(exc)) if "runc not found" in str(exc) else pytest.skip(str(exc))
        made.append(p)
        return p

    try:
        yield make
    finally:
        for p in reversed(made):
            p.remove()


def as_postgres() -> str:
    pw = pwd.getpwnam("postgres")
    return f"{pw.pw_uid}:{pw.pw_gid}"


def pg_ctl_start(p: Pod, c):
    return p.exec(f"{c.bindir}/pg_ctl", "-D", c.datadir, "-l", c.log, "-w", "-t", "60",
                  "start", user=as_postgres())


def pool_free() -> int:
    return int(Path("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages").read_text())


def codes(report, iid):
    return {f["code"]: f for f in report["findings"] if f["instance"] == iid}


def test_kubelet_limit_zero_applied_by_runc_is_a_crash_predicted_from_inside(pg_factory, pod,
                                                                             knobs):
    """A pod that requested no 2 MiB pages: the kubelet asks runc for hugetlb.2MB.max = 0 on
    the container (runc 1.1 sets the fault limit only), the host has a free pool. `check
    --pgdata` in the container, before the first start, predicts the SIGBUS and plans
    huge_pages = off; starting the server there (huge_pages = try, the default) then dies as
    predicted."""
    knobs.pool(2048, 200)
    c = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    p = pod(pod_limit=None, container_limit=0, cluster=c)
    assert (p.cgroup / "hugetlb.2MB.max").read_text().strip() == "0"  # runc applied it
    # runc 1.1 leaves the reservation limit as the kernel made the cgroup: none (the largest
    # page-aligned count, not the word "max", until someone writes "max")
    rsvd = (p.cgroup / "hugetlb.2MB.rsvd.max").read_text().strip()
    assert rsvd == "max" or int(rsvd) >= 2**63 - 2**21, rsvd
    r = p.hpadvise("check", "--json", "--db", "postgres", "--pgdata", c.datadir)
    inside = json.loads(r.stdout)
    assert inside["host"]["in_container"] and inside["host"]["cgroup_hidden"] == ["/sys/fs/cgroup"]
    i = instance(inside, c.datadir)
    assert not i["running"] and i["cgroup_from"] == "hpadvise"
    f = codes(inside, i["id"])["cgroup.hugetlb.sigbus"]
    assert f["severity"] == "crit" and "at its first start" in f["title"]
    assert "/sys/fs/cgroup/hugetlb.2MB.max = 0" in f["evidence"]
    assert {(ch["target"], ch["recommended"]) for ch in inside["plan"]["changes"]
            if ch["instance"] == i["id"]} == {("huge_pages", "off")}
    # as predicted: the first start in the container dies of SIGBUS
    events = p.events()
    r = pg_ctl_start(p, c)
    assert r.returncode != 0, r.stdout + r.stderr
    assert p.events() > events


def test_pod_limit_found_from_the_host_with_the_pod_named_and_unseen_from_inside(
        pg_factory, pod, knobs):
    """The limit on the pod's cgroup only (pod-level resources; the container unlimited):
    PostgreSQL starts on huge pages in the container. From the host, check gives the crit
    SIGBUS prediction naming the pod, its QoS class and the container, the pod's level being
    the one that bites; from inside, the limits above are out of sight and the instance is
    not passed as fine. A load then ends in signal 7, as predicted."""
    knobs.pool(2048, 200)
    c = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    p = pod(pod_limit=40 * MiB, container_limit=None, cluster=c)
    r = pg_ctl_start(p, c)
    assert r.returncode == 0, r.stderr + c.logtail()
    report, _ = check_json("--db", "postgres")
    i = instance(report, c.datadir)
    assert i["backing"] == "hugetlb"
    f = codes(report, i["id"])["cgroup.hugetlb.sigbus"]
    assert f["severity"] == "crit"
    assert f"Kubernetes pod {p.uid} (burstable), container {p.id[:12]}" in f["evidence"]
    assert f"the pod's limit: Kubernetes pod {p.uid}" in f["title"], f["title"]
    # the limit that bites is the pod's file, above the container's own (unlimited)
    assert f"{p.pod_cgroup}/hugetlb.2MB.max = {40 * MiB}" in f["evidence"]
    r = p.hpadvise("check", "--json", "--db", "postgres")
    inside = json.loads(r.stdout)
    j = instance(inside, c.datadir)
    seen = codes(inside, j["id"])
    assert "cgroup.hugetlb.unseen" in seen and seen["cgroup.hugetlb.unseen"]["severity"] == "warn"
    assert {(ch["target"], ch["recommended"]) for ch in inside["plan"]["changes"]
            if ch["instance"] == j["id"]} == {("huge_pages", "off")}
    # measured from inside: a probe faults free pages until the pod's limit stops it
    free = pool_free()
    r = p.hpadvise("check", "--json", "--db", "postgres", "--measure-limits")
    measured = json.loads(r.stdout)
    f = codes(measured, instance(measured, c.datadir)["id"])["cgroup.hugetlb.sigbus"]
    assert f["severity"] == "crit" and f["title"].endswith("(measured)"), f
    left = (40 * MiB - int((p.pod_cgroup / "hugetlb.2MB.current").read_text())) // (2 * MiB)
    touched = int(re.search(r"faulted (\d+) of \d+ x 2 MiB pages, then SIGBUS",
                            f["evidence"]).group(1))
    assert abs(touched - left) <= 1, (touched, left, f["evidence"])
    assert pool_free() == free  # the probe's pages went back
    # the load faults the buffers past the pod's limit: SIGBUS
    load = subprocess.run(["runuser", "-u", "postgres", "--", f"{c.bindir}/psql", "-h", c.tmp,
                           "-p", str(c.port), "-d", "postgres", "-c",
                           # INSERT, not CREATE TABLE AS: a bulk write cycles through a
                           # 16 MB ring of buffers (src/backend/storage/buffer/README), which
                           # stays under the pod's 40 MiB; an INSERT fills ~70 MB of them
                           "CREATE TABLE big (g int, pad text); INSERT INTO big SELECT g, "
                           "repeat('x', 200) FROM generate_series(1, 300000) g"],
                          capture_output=True, text=True,
                          cwd="/")
    deadline = time.time() + 30
    while "signal 7" not in Path(c.log).read_text() and time.time() < deadline:
        time.sleep(0.2)
    assert "terminated by signal 7: Bus error" in Path(c.log).read_text(), load.stderr


def test_jvm_in_a_pod_found_from_the_host_then_killed_by_its_load(pod, knobs, classes):
    """A JVM on 2 MiB pages (-XX:+UseLargePages, a 256 MiB heap) in a container whose pod may
    fault 160 MiB of them: it starts (its heap is reserved, not touched), check on the host
    predicts the crash naming the pod and the container and plans -XX:-UseLargePages; a load
    that fills the heap then ends it with SIGBUS, as predicted."""
    knobs.pool(2048, 400)
    p = pod(pod_limit=160 * MiB, container_limit=None, readonly=[str(classes)])
    jvm = p.popen("java", "-XX:+UseLargePages", "-Xms256m", "-Xmx256m", "-cp", str(classes),
                  "Idle")
    try:
        first = jvm.stdout.readline()
        while first and not first.startswith("ready"):
            first = jvm.stdout.readline()
        assert first.startswith("ready"), jvm.stdout.read()[-500:]
        report, _ = check_json("--db", "jvm")
        [i] = [x for x in report["instances"] if x["pid"] in p.pids()]
        assert i["backing"] == "hugetlb"
        f = codes(report, i["id"])["cgroup.hugetlb.sigbus"]
        assert f["severity"] == "crit"
        assert f"Kubernetes pod {p.uid} (burstable), container {p.id[:12]}" in f["evidence"]
        assert f"{p.pod_cgroup}/hugetlb.2MB.max = {160 * MiB}" in f["evidence"]
        assert {(ch["target"], ch["recommended"]) for ch in report["plan"]["changes"]
                if ch["instance"] == i["id"]} == {("java options", "-XX:-UseLargePages")}
        events = p.events()
        jvm.stdin.write("fill 150\n")
        jvm.stdin.flush()
        out = jvm.stdout.read()  # until the JVM is gone
        assert "SIGBUS" in out and "filled" not in out, out[-800:]
        assert p.events() > events
    finally:
        jvm.kill()
        jvm.wait()


def test_measured_limits_take_only_free_unreserved_pages(pg_factory, pod, knobs):
    """`check --measure-limits` inside a pod whose limit (400 MiB) holds a stopped cluster's
    72 pages: while a server on the host has 72 of the pool's 112 pages reserved, the probe
    takes only the 40 others (that server runs on undisturbed) and, having measured fewer
    pages than the need, keeps the limit unknown; with the server stopped it faults all 72,
    says so (info) and the plan puts the cluster on huge pages."""
    knobs.pool(2048, 112)
    host = pg_factory({"shared_buffers": "128MB", "huge_pages": "on"})
    host.start()
    c = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    p = pod(pod_limit=400 * MiB, container_limit=None, cluster=c)
    args = ("check", "--json", "--db", "postgres", "--pgdata", c.datadir, "--measure-limits")
    inside = json.loads(p.hpadvise(*args).stdout)
    f = codes(inside, instance(inside, c.datadir)["id"])["cgroup.hugetlb.unseen"]
    assert "faulted 40 of 40 x 2 MiB pages without SIGBUS (the pool has 40 free unreserved)" \
        in f["evidence"], f["evidence"]
    host.psql("SELECT count(*) FROM pg_class")  # the host's server is undisturbed
    host.stop()
    inside = json.loads(p.hpadvise(*args).stdout)
    i = instance(inside, c.datadir)
    found = codes(inside, i["id"])
    assert "cgroup.hugetlb.unseen" not in found and "cgroup.hugetlb.sigbus" not in found
    m = found["cgroup.hugetlb.measured"]
    assert m["severity"] == "info" and "faulted 72 of 72 x 2 MiB pages without SIGBUS" \
        in m["evidence"]
    assert ("huge_pages", "off") not in {(ch["target"], ch["recommended"])
                                         for ch in inside["plan"]["changes"]
                                         if ch["instance"] == i["id"]}
    assert pool_free() == 112


def test_adequate_pod_limits_run_on_huge_pages_without_a_finding(pg_factory, pod, knobs):
    """A pod that requested its pages (the pod and the container each allowed 400 MiB, as the
    kubelet sets both for a request): PostgreSQL inside runs on huge pages through a load,
    and check on the host has nothing to say of its cgroups."""
    knobs.pool(2048, 200)
    c = pg_factory({"shared_buffers": "128MB", "huge_pages": "on"})
    p = pod(pod_limit=400 * MiB, container_limit=400 * MiB, cluster=c)
    r = pg_ctl_start(p, c)
    assert r.returncode == 0, r.stderr + c.logtail()
    c.psql("CREATE TABLE big (g int, pad text); INSERT INTO big SELECT g, repeat('x', 200) "
           "FROM generate_series(1, 300000) g")
    report, _ = check_json("--db", "postgres")
    i = instance(report, c.datadir)
    assert i["backing"] == "hugetlb"
    assert not [code for code in codes(report, i["id"]) if code.startswith("cgroup.")]
    assert p.events() == 0 and int((p.cgroup / "hugetlb.2MB.current").read_text()) > 64 * MiB
