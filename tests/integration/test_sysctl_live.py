"""The declared kernel settings on this host's kernel (advisor/facts/sysctls.py).

vm.hugetlb_shm_group: Debian's JDK 17 with -XX:+UseSHM, run as nobody (no CAP_IPC_LOCK), asks
for its heap as a SysV segment on huge pages (shmget SHM_HUGETLB), which the kernel refuses
(it runs on 4 KiB pages); check plans the group of nogroup and the pages; apply sets, reads
back and persists both; the JVM started again takes exactly those pages through SysV shared
memory; rollback puts the setting, the drop-in and the pool back.

vm.zone_reclaim_mode on this one-node host: set by hand, check leaves it alone and says the
next boot gives the kernel's default back (the two-node guest proves the plan that changes
it)."""

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from support import check_json, run_cli

pytestmark = pytest.mark.integration
GROUP = "/proc/sys/vm/hugetlb_shm_group"
IDLE = Path(__file__).resolve().parents[1] / "fixtures" / "java" / "Idle.java"


def _taken() -> int:
    m = {ln.split(":")[0]: int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text()
         .splitlines() if ln.startswith("HugePages_")}
    return m["HugePages_Total"] - m["HugePages_Free"] + m["HugePages_Rsvd"]


@pytest.fixture
def as_nobody():
    """A JVM started as nobody (group nogroup, no capabilities), from classes it can read."""
    if not shutil.which("javac"):
        pytest.fail("javac not found: run scripts/test.sh, which installs a JDK")
    d = tempfile.mkdtemp(prefix="hpadvise-shm-")
    os.chmod(d, 0o755)
    subprocess.run(["javac", "--release", "11", "-d", d, str(IDLE)], check=True)
    pw = pwd.getpwnam("nobody")
    procs = []

    def start(*flags):
        p = subprocess.Popen(["java", *flags, "-cp", d, "Idle"], cwd="/", user=pw.pw_uid,
                             group=pw.pw_gid, extra_groups=[], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        procs.append(p)
        before = []
        while not (line := p.stdout.readline()).startswith("ready"):
            assert line, "java exited: " + "".join(before)
            before.append(line)
        p.first = "".join(before)
        return p

    yield start, pw.pw_gid
    for p in procs:
        p.kill()
        p.wait()
    shutil.rmtree(d, ignore_errors=True)


def test_hugetlb_shm_group_for_a_jvm_on_sysv_huge_pages(as_nobody, knobs, tmp_path):
    start, gid = as_nobody
    flags = ("-XX:+UseLargePages", "-XX:+UseSHM", "-XX:-UsePerfData", "-Xmx256m", "-Xms256m")
    knobs.set(GROUP, 0)
    knobs.pool(2048, 0)
    p = start(*flags)
    report, r = check_json("--db", "jvm")
    assert r.returncode == 0, r.stderr
    i = next(x for x in report["instances"] if x["id"] == f"jvm:{p.pid}")
    assert i["backing"] == "4k"
    n = i["demand"]["pages"]["2048"]
    # the heap and G1's two 4 MiB mark bitmaps; not the code cache (no executable SysV pages)
    assert n == 128 + 2 + 2, i["demand"]["source"]
    change = [c for c in report["plan"]["changes"] if c["kind"] == "sysctl"]
    assert [(c["target"], c["current"], c["recommended"]) for c in change] == [
        ("vm.hugetlb_shm_group", 0, gid)]
    boot = {b["knob"]: b for b in report["plan"]["boot"]}
    assert boot["sysctl.vm.hugetlb_shm_group"]["plan"] == str(gid)
    assert boot["sysctl.vm.hugetlb_shm_group"]["at_boot"] == "0"
    assert "kernel.hugetlb_shm_group" in {f["code"] for f in report["findings"]}

    j, root = tmp_path / "journal", tmp_path / "root"
    (root / "etc" / "sysctl.d").mkdir(parents=True)
    r = run_cli("apply", "--db", "jvm", "--yes", "--journal-dir", str(j),
                "--persist-root", str(root))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert int(Path(GROUP).read_text()) == gid
    drop_in = (root / "etc/sysctl.d/60-hpadvise.conf").read_text()
    assert f"vm.hugetlb_shm_group = {gid}" in drop_in.splitlines(), drop_in
    pool = int(Path("/proc/sys/vm/nr_hugepages").read_text())
    assert pool >= n

    p.kill()
    p.wait()
    q = start(*flags)  # started again: now the kernel admits its group
    assert "shared memory" not in q.first.lower(), q.first
    maps = Path(f"/proc/{q.pid}/smaps").read_text()
    assert "/SYSV" in maps and _taken() == n, f"computed {n}, the JVM took {_taken()}"
    report, _ = check_json("--db", "jvm")
    i = next(x for x in report["instances"] if x["id"] == f"jvm:{q.pid}")
    assert i["backing"] == "hugetlb"
    assert not [c for c in report["plan"]["changes"] if c["kind"] == "sysctl"]
    assert "kernel.hugetlb_shm_group" not in {f["code"] for f in report["findings"]}
    q.kill()
    q.wait()

    r = run_cli("rollback", "--yes", "--journal-dir", str(j))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert int(Path(GROUP).read_text()) == 0
    assert not (root / "etc/sysctl.d/60-hpadvise.conf").exists()
    assert int(Path("/proc/sys/vm/nr_hugepages").read_text()) == 0


def test_zone_reclaim_mode_on_one_node_is_left_alone(knobs):
    nodes = [d for d in os.listdir("/sys/devices/system/node") if d.startswith("node")]
    if len(nodes) != 1:
        pytest.skip(f"this host has {len(nodes)} NUMA nodes; the case is a one-node host's")
    knobs.set("/proc/sys/vm/zone_reclaim_mode", 1)
    report, r = check_json()
    assert r.returncode in (0, 1), r.stderr
    assert report["host"]["sysctls"]["vm.zone_reclaim_mode"] == 1
    assert not [c for c in report["plan"]["changes"] if c["kind"] == "sysctl"
                and c["target"] == "vm.zone_reclaim_mode"]
    assert "kernel.zone_reclaim_mode" not in {f["code"] for f in report["findings"]}
    # set by hand, persisted nowhere: the next boot gives the kernel's default back
    assert [f["title"] for f in report["findings"] if f["code"] == "boot.differs"
            and "vm.zone_reclaim_mode" in f["title"]] == [
        "vm.zone_reclaim_mode is 1 now and 0 after a reboot"]
