"""THP as Linux 6.x decides it, on this kernel: a ZGC heap (a shared memfd, on THP through
shmem_enabled) keeps its THP through check, apply with every shipped profile and its restart;
a per-size knob that overrides the top level is found, planned, set and rolled back. The
apply runs in a PID namespace of its own (unshare), where only the JVM it starts is seen: the
system's own servers are out of its sight."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO, THP, check_json, host_state, in_own_pid_namespace, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]

ZGC = ["-XX:+UseZGC", "-XX:+UseTransparentHugePages", "-Xms1g", "-Xmx1g"]

SCRIPT = r'''
import json, re, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from support import run_cli, check_json
classes, j, root, out = sys.argv[2:6]
flags = json.loads(sys.argv[6])
THP = "/sys/kernel/mm/transparent_hugepage"
res = {"profiles": {}}
procs = []

def start():
    p = subprocess.Popen(["java", *flags, "-cp", classes, "Idle"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    procs.append(p)
    while not p.stdout.readline().startswith("ready"):
        pass
    return p

def pmd(pid):
    text = open(f"/proc/{pid}/smaps_rollup").read()
    return int(re.search(r"ShmemPmdMapped:\s+(\d+)", text).group(1))

def seen(pid):
    report, _ = check_json("--db", "all")
    codes = [f["code"] for f in report["findings"] if f["instance"] == f"jvm:{pid}"]
    shmem = [c for c in report["plan"]["changes"] if c.get("knob") == "shmem_enabled"]
    jvm = next((i for i in report["instances"] if i["id"] == f"jvm:{pid}"), {})
    return codes, shmem, [g for g in jvm.get("thp_regions", []) if g["kind"] == "shared"]

def shmem_now():
    return re.search(r"\[(\w+)\]", open(f"{THP}/shmem_enabled").read()).group(1)

try:
    p = start()
    for prof in ("oltp", "jvm", "mixed"):
        d = res["profiles"][prof] = {"pmd_before": pmd(p.pid)}
        d["check"] = seen(p.pid)
        r = run_cli("apply", "--db", "all", "--profile", prof, "--yes", "--journal-dir", j,
                    "--persist-root", root)
        d["apply"] = [r.returncode, r.stdout[-1500:], r.stderr[-1500:]]
        d["shmem_after_apply"] = shmem_now()
        p.kill(); p.wait()
        p = start()  # its restart under what apply left
        time.sleep(0.5)
        d["pmd_after_restart"] = pmd(p.pid)
        d["check_after"] = seen(p.pid)
        r = run_cli("rollback", "--yes", "--journal-dir", j)
        d["rollback"] = [r.returncode, r.stderr[-800:]]
finally:
    for q in procs:
        q.kill(); q.wait()
    open(out, "w").write(json.dumps(res))
'''


def _set(path, value):
    Path(path).write_text(value)


def _mode(path):
    return Path(path).read_text().split("[")[1].split("]")[0]


def test_zgc_keeps_shmem_thp_through_check_apply_and_restart(knobs, classes, tmp_path):
    _set(f"{THP}/shmem_enabled", "advise")  # ZGC's heap needs it (knobs restores it)
    before = host_state()
    j, root = tmp_path / "journal", tmp_path / "root"
    root.mkdir()
    out = tmp_path / "out.json"
    r = in_own_pid_namespace(tmp_path, SCRIPT, [str(REPO / "tests"), str(classes), str(j),
                                                str(root), str(out), json.dumps(ZGC)], j, 900)
    assert out.exists(), r.stdout[-1500:] + r.stderr[-1500:]
    res = json.loads(out.read_text())
    assert set(res["profiles"]) == {"oltp", "jvm", "mixed"}, (r.stderr[-2000:], res)
    for prof, d in res["profiles"].items():
        assert d["pmd_before"] > 0, (prof, d)
        codes, shmem, heap = d["check"]
        assert "jvm.thp.active" in codes and not shmem, (prof, d["check"])
        # the heap's memfd: shared memory, madvise()d, on THP, kept at 2 MiB by the plan
        assert [(g["advice"], g["huge_kb"] > 0, g["sizes_now"], g["sizes_planned"])
                for g in heap] == [("madvise", True, [2048], [2048])], (prof, heap)
        assert d["apply"][0] == 0, (prof, d["apply"])
        assert d["shmem_after_apply"] == "advise", (prof, d)
        assert d["pmd_after_restart"] > 0, (prof, d)
        codes, shmem, _ = d["check_after"]
        assert "jvm.thp.active" in codes and not shmem, (prof, d["check_after"])
        # an apply that changed nothing (the plan keeps what runs) has nothing to roll back
        assert d["rollback"][0] == 0 or "nothing to roll back" in d["rollback"][1], \
            (prof, d["rollback"])
    assert host_state() == before


def test_zgc_heap_off_thp_is_not_called_on_thp(knobs, java):
    _set(f"{THP}/shmem_enabled", "never")  # what the old plans wrote
    p = java(*ZGC)
    report, r = check_json("--db", "jvm")
    assert r.returncode == 0, r.stderr
    codes = {f["code"]: f for f in report["findings"] if f["instance"] == f"jvm:{p.pid}"}
    assert "jvm.thp.active" not in codes and "jvm.thp.never" in codes, codes
    want = [c for c in report["plan"]["changes"] if c.get("knob") == "shmem_enabled"]
    assert [(c["current"], c["recommended"]) for c in want] == [("never", "advise")]
    # its heap gets no THP now, and 2 MiB pages once the plan's advise is applied
    jvm = next(i for i in report["instances"] if i["id"] == f"jvm:{p.pid}")
    heap = [(g["advice"], g["sizes_now"], g["sizes_planned"]) for g in jvm["thp_regions"]
            if g["kind"] == "shared"]
    assert heap == [("madvise", [], [2048])], jvm["thp_regions"]


def test_per_size_override_found_planned_set_and_rolled_back(knobs, classes, tmp_path):
    knob = f"{THP}/hugepages-2048kB/enabled"
    if not os.path.exists(knob):
        pytest.skip("kernel without per-size THP knobs (before 6.8)")
    _set(knob, "always")
    report, r = check_json("--db", "redis")
    assert r.returncode == 0, r.stderr
    over = [f for f in report["findings"] if f["code"] == "thp.size_override"]
    assert over and over[0]["severity"] == "warn", report["findings"]
    ch = [(c["knob"], c["current"], c["recommended"]) for c in report["plan"]["changes"]
          if c["kind"] == "thp"]
    assert ("hugepages-2048kB/enabled", "always", "inherit") in ch
    j = tmp_path / "j"
    # in a PID namespace of its own: no server of the host's is in its sight
    # with a JVM of its own to plan for (apply wants an instance)
    out = tmp_path / "java.out"
    sh = (f"java -Xmx256m -XX:+UseTransparentHugePages -cp {classes} Idle > {out} 2>&1 & "
          f"for i in $(seq 300); do grep -q ready {out} && break; sleep 0.1; done; "
          f"{sys.executable} -m hpadvise.cli apply --db jvm --yes --no-persist "
          f"--journal-dir {j}; rc=$?; kill $!; wait; exit $rc")
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", sh],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _mode(knob) == "inherit"
    report, _ = check_json("--db", "redis")  # read back: nothing left to plan or say
    assert not [f for f in report["findings"] if f["code"] == "thp.size_override"]
    r = run_cli("rollback", "--yes", "--journal-dir", str(j))
    assert r.returncode == 0, r.stdout + r.stderr
    assert _mode(knob) == "always"
