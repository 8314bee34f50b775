"""Two NUMA nodes in a real kernel: Debian 12's own, booted under QEMU's emulation with two
nodes of 3 GiB (scripts/guest.sh builds the image once and caches it outside the checkout).
Inside, tests/guests/numa_lab.py runs PostgreSQL 15 bound to node 1 by numactl --membind, by a
cgroup's cpuset.mems and by a systemd unit's AllowedMemoryNodes=, and through hpadvise check,
apply --restart and rollback (the first with vm.zone_reclaim_mode set to 1, which the plan
sets to 0 on two nodes); then the short-node start. The guest's root disk is a snapshot:
nothing of it outlives the run, and nothing of this host is changed."""

from __future__ import annotations

import os
import shutil
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

import hostlock
from support import check_json

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "guests"))
from hostside import run_lab  # noqa: E402

NUMA = ["-m", "6G", "-smp", "2",
        "-object", "memory-backend-ram,id=m0,size=3G",
        "-object", "memory-backend-ram,id=m1,size=3G",
        "-numa", "node,nodeid=0,cpus=0,memdev=m0", "-numa", "node,nodeid=1,cpus=1,memdev=m1"]
CASES = ("numactl", "cpuset", "systemd", "short", "short_cpuset")
BESIDE_AS = "numa-lab-guest"  # the process name of its QEMU (scripts/guest.sh)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The guest's run, beside the host's tests: while it boots and runs, the tests that take
    all free memory for a moment wait (the memory lock, tests/hostlock.py), and its QEMU
    runs under a name of its own, so that their checks do not count it among the host's
    guests."""
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(run_lab, tmp_path_factory.mktemp("numa-guest"), "numa_lab.py", CASES,
                          NUMA, env={"HPADVISE_GUEST_AS": BESIDE_AS},
                          booted=lambda: hostlock.Held(hostlock.MEMORY_LOCK))
        seen = _seen_from_the_host(run)
        return {**run.result(), "seen_from_the_host": seen}


def _seen_from_the_host(run: Future) -> dict:
    """While the guest runs: its QEMU's process name, and what a check of the host's QEMU
    guests found of it."""
    qemu = os.path.realpath(shutil.which("qemu-system-x86_64") or "qemu-system-x86_64")
    while not run.done():
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                # this worker's own guest: a QEMU the host's tests start beside is not it
                if os.readlink(f"/proc/{pid}/exe") != qemu or not _ours(int(pid)):
                    continue
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            report, _ = check_json("--db", "qemu")
            return {"pid": int(pid), "comm": comm,
                    "instances": [(i["id"], i["pid"]) for i in report["instances"]]}
        time.sleep(0.5)
    return {}


def _ours(pid: int) -> bool:
    """Whether `pid` descends from this process (raises OSError when a parent has ended)."""
    while pid > 1:
        if pid == os.getpid():
            return True
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return False


def _check(case: dict, how: str) -> None:
    """Check saw the binding, put the demand on node 1 and planned node 1's pool for it."""
    c = case["check"]
    assert c["rc"] == 0, c["stderr"]
    assert how in c["numa_binding"] and c["node"] == 1
    (pool,) = c["pools"]
    per = dict(pool["per_node"])
    assert per[1] >= c["pages"]["2048"] and per[0] < per[1]
    assert sum(per.values()) == pool["target_pages"]
    codes = [code for code, _ in c["findings"]]
    # the pool is empty in all: the plan's pool change says so, not a short node
    assert "pool.per_node" in codes and "pool.node_short" not in codes


def _applied_and_rolled_back(case: dict, policy: str | None, mems: str) -> None:
    before, after = case["before"], case["after_apply"]["server"]
    assert case["apply"]["rc"] == 0, case["apply"]["stderr"]
    # restarted (a new postmaster), still bound as before, its huge pages on node 1 only
    assert after["running"] and after["pid"] != before["pid"]
    assert after["mems_allowed"] == mems == before["mems_allowed"]
    if policy:
        assert after["policies"] == [policy] == before["policies"]
    assert after["cgroup"] == before["cgroup"]
    assert set(after["huge_pages_by_node"]) == {"1"}, after
    pools = case["after_apply"]["pools"]
    need = case["check"]["pages"]["2048"]
    assert pools["1"]["nr"] >= need and pools["0"]["nr"] < need
    after_codes = [code for code, _ in case["check_after"]["findings"]]
    assert "pg.huge_pages.active" in after_codes
    # the per-node pools apply persisted are what the next boot makes (each node written)
    assert "boot.instance_breaks" not in after_codes, case["check_after"]["findings"]
    # rollback: every node's pool read back at 0, the server restarted and still bound
    rb = case["rollback"]
    assert rb["rc"] == 0 and rb["json"]["errors"] == [], rb
    assert any("node 1" in line for line in rb["json"]["restored"])
    for n in ("0", "1"):
        assert case["after_rollback"]["pools"][n] == {"nr": 0, "free": 0, "surplus": 0}
    end = case["after_rollback"]["server"]
    assert end["running"] and end["mems_allowed"] == mems and end["huge_pages_by_node"] == {}
    if policy:
        assert end["policies"] == [policy]


def test_a_check_of_the_host_beside_it_does_not_count_the_guest(lab):
    """The guest's QEMU runs under a name of its own (scripts/guest.sh, HPADVISE_GUEST_AS), and
    a check of the host's QEMU guests made while it ran found no instance of it."""
    seen = lab["seen_from_the_host"]
    assert seen, "the guest's QEMU was never seen running"
    assert seen["comm"] == BESIDE_AS, seen
    assert not [i for i in seen["instances"] if i[1] == seen["pid"]
                or i[0] == f"qemu:{seen['pid']}"], seen


def test_two_nodes_seen(lab):
    assert lab["nodes"] == ["node0", "node1"]


def test_bound_by_numactl_membind(lab):
    _check(lab["numactl"], "memory policy bind:1")
    _applied_and_rolled_back(lab["numactl"], "bind:1", "0-1")


def test_zone_reclaim_mode_on_two_nodes(lab):
    """Set to 1 by hand: check plans 0 (two nodes), apply sets and persists it, rollback puts
    1 back and removes the drop-in (facts/sysctls.py declares the setting)."""
    c = lab["numactl"]
    assert c["check"]["sysctl_changes"] == [["vm.zone_reclaim_mode", 1, 0]]
    assert "kernel.zone_reclaim_mode" in [code for code, _ in c["check"]["findings"]]
    after = c["after_apply"]["sysctls"]
    assert after["zone_reclaim_mode"] == 0
    assert "vm.zone_reclaim_mode = 0" in after["drop_in"].splitlines(), after["drop_in"]
    assert c["check_after"]["sysctl_changes"] == []
    assert c["after_rollback"]["sysctls"] == {"zone_reclaim_mode": 1, "drop_in": None}


def test_bound_by_a_cgroup_cpuset(lab):
    _check(lab["cpuset"], "cpuset.mems 1")
    _applied_and_rolled_back(lab["cpuset"], None, "1")
    assert lab["cpuset"]["after_apply"]["server"]["cgroup"] == "0::/hplab"


def test_bound_by_a_systemd_unit(lab):
    _check(lab["systemd"], "cpuset.mems 1")
    _applied_and_rolled_back(lab["systemd"], None, "1")
    assert lab["systemd"]["after_apply"]["server"]["cgroup"].endswith("/pglab.service")


def _short(s: dict, how: str) -> None:
    # the pool is large enough in all, all of it on node 0
    assert s["pools"]["1"]["nr"] == 0 and s["pools"]["0"]["free"] >= s["check"]["pages"]["2048"]
    assert how in s["check"]["numa_binding"]
    (ev,) = [e for code, e in s["check"]["findings"] if code == "pool.node_short"]
    assert "node 1 has 0 free" in ev and "enough, on the other nodes" in ev
    # as predicted: huge_pages=on does not start, try starts on 4 KiB pages
    assert s["start_on"]["rc"] != 0 and not s["start_on"]["server"]["running"]
    assert any("could not map anonymous shared memory" in ln for ln in s["start_on"]["log"])
    assert s["start_try"]["server"]["running"]
    assert s["start_try"]["server"]["huge_pages_by_node"] == {}
    assert s["start_try"]["pools"]["0"]["free"] == s["pools"]["0"]["free"]


def test_short_node_predicted_then_reproduced(lab):
    """Bound by a memory policy (numactl --membind): the reservation counts node 1 only."""
    _short(lab["short"], "memory policy bind:1")


def test_short_node_under_a_cpuset(lab):
    """Bound by a cpuset: the same (mm/hugetlb.c allowed_mems_nr, cpuset_current_mems_allowed)."""
    _short(lab["short_cpuset"], "cpuset.mems 1")
