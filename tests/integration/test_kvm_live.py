"""Real KVM guests (paused with -S) whose RAM is a memory-backend-file on a 1 GiB hugetlbfs
mount: check finds them and their backing; a guest mapped without a reservation on a pool
that cannot hold it is a crit finding; apply with the kvm-host profile plans the 1 GiB pool; a
guest with prealloc=on then holds every page; a guest on memfd (no hugetlb) gets the libvirt
and kernel command line advice. Teardown kills the guests, unmounts and restores the pools."""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from gigantic import GiganticRoom
from support import check_json, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]
GiB = 1 << 30


@pytest.fixture
def kvm(knobs):
    if not os.path.exists("/dev/kvm"):
        pytest.skip("no /dev/kvm")
    qemu = shutil.which("qemu-system-x86_64")
    if not qemu:
        pytest.fail("qemu-system-x86_64 not found: run scripts/test.sh, which installs it")
    if "pdpe1gb" not in open("/proc/cpuinfo").read():
        pytest.skip("the CPU has no 1 GiB pages")
    mnt = tempfile.mkdtemp(prefix="hpadvise-hugepages-1g-")
    subprocess.run(["mount", "-t", "hugetlbfs", "-o", "pagesize=1G", "none", mnt], check=True)
    guests = []

    def start(name, backend, check=True):
        p = subprocess.Popen([qemu, "-enable-kvm", "-S", "-display", "none", "-nodefaults",
                              "-name", f"guest={name}", "-m", "2G", "-object", backend,
                              "-machine", "pc,memory-backend=mem0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        guests.append(p)
        deadline = time.time() + 120
        while time.time() < deadline:  # up once its RAM is mapped (and, with prealloc, touched:
            if p.poll() is not None:    # zeroing 1 GiB pages takes seconds in a VM)
                if check:
                    raise AssertionError(p.stderr.read())
                return p
            try:
                maps = open(f"/proc/{p.pid}/smaps").read()
                status = open(f"/proc/{p.pid}/status").read()
            except OSError:
                maps = status = ""
            held = int(status.split("HugetlbPages:")[1].split()[0]) if "HugetlbPages:" in \
                status else 0
            if (mnt in maps and ("prealloc=on" not in backend or held >= 2 * GiB // 1024)) \
                    or "memfd:" in maps:
                time.sleep(0.3)
                return p
            time.sleep(0.1)
        raise AssertionError("qemu did not map its RAM")

    def stop(p):
        p.kill()
        p.wait()

    try:
        yield start, stop, mnt
    finally:
        for p in guests:
            if p.poll() is None:
                p.kill()
                p.wait()
        subprocess.run(["umount", mnt], check=False)
        os.rmdir(mnt)


def _guest(report, name):
    return next(i for i in report["instances"] if i["id"] == f"qemu:{name}")


def _codes(report, iid):
    return {f["code"]: f for f in report["findings"] if f["instance"] == iid}


def test_guest_on_1g_pages_planned_held_and_short(kvm, knobs, tmp_path):
    start, stop, mnt = kvm
    # 1 GiB pages at runtime need free, aligned 1 GiB ranges: on a host whose memory is
    # fragmented (page cache and slab after a large benchmark) the kernel cannot grant them,
    # which is the case apply reports as a shortfall. Find out first, after compacting, and
    # once more after making room as the other 1 GiB tests do (a host up for hours of the
    # suite granted 2 of 3 after compacting alone).
    Path("/proc/sys/vm/compact_memory").write_text("1")
    got = knobs.pool(1048576, 3)
    knobs.pool(1048576, 0)
    if got < 3:
        GiganticRoom.make()
        got = knobs.pool(1048576, 3)
        knobs.pool(1048576, 0)
    if got < 3:
        pytest.skip(f"the kernel grants only {got} of 3 x 1 GiB pages at runtime now")
    lazy = f"memory-backend-file,id=mem0,size=2G,mem-path={mnt},share=on,reserve=off"
    g = start("hpt-lazy", lazy)
    report, _ = check_json("--db", "qemu", "--profile", "kvm-host")
    i = _guest(report, "hpt-lazy")
    assert i["backing"] == "hugetlb" and i["backing_page_kb"] == 1048576
    f = _codes(report, i["id"])["qemu.hugepages.short"]
    assert f["severity"] == "crit" and "SIGBUS" in f["rationale"] and "2 pages" in f["rationale"]
    # apply with the kvm-host profile plans and reserves the 1 GiB pool
    (tmp_path / "root").mkdir()
    r = run_cli("apply", "--db", "qemu", "--profile", "kvm-host", "--yes", "--json",
                "--journal-dir", str(tmp_path / "j"), "--persist-root", str(tmp_path / "root"))
    if r.returncode != 0 and json.loads(r.stdout or "{}").get("status") == "shortfall":
        # the kernel gave the pages back to the buddy allocator and split them since: apply
        # reported the shortfall and undid everything, as it must; nothing more to test here
        pytest.skip("1 GiB pages could not be had at runtime for apply: " +
                    r.stderr.strip()[:200])
    assert r.returncode == 0, r.stdout + r.stderr
    [pool] = [c for c in json.loads(r.stdout)["changes"] if c["kind"] == "pool"]
    assert "1 GiB" in pool["target"] and pool["after"] >= 2
    report, _ = check_json("--db", "qemu", "--profile", "kvm-host")
    assert "qemu.hugepages.short" not in _codes(report, i["id"])
    stop(g)
    # with prealloc the guest holds every page of its RAM
    g = start("hpt-full", f"memory-backend-file,id=mem0,size=2G,mem-path={mnt},share=on,"
                          "prealloc=on")
    report, _ = check_json("--db", "qemu", "--profile", "kvm-host")
    i = _guest(report, "hpt-full")
    assert i["demand"]["held_pages"] == 2 and i["demand"]["pages"]["1048576"] == 2
    f = _codes(report, i["id"])["qemu.hugepages.active"]
    assert "every page of its RAM" in f["rationale"] and "1 GiB" in f["title"]
    stop(g)
    # one page too few: with prealloc the start fails cleanly; without, check says it
    assert knobs.pool(1048576, 1) == 1
    bad = start("hpt-fails", f"memory-backend-file,id=mem0,size=2G,mem-path={mnt},share=on,"
                             "prealloc=on", check=False)
    assert bad.wait(timeout=30) != 0
    g = start("hpt-short", lazy)
    report, _ = check_json("--db", "qemu")
    f = _codes(report, "qemu:hpt-short")["qemu.hugepages.short"]
    assert "Grow the pool by 1 pages" in f["rationale"]
    stop(g)
    r = run_cli("rollback", "--yes", "--journal-dir", str(tmp_path / "j"))
    assert r.returncode == 0, r.stderr


def test_guest_on_memfd_gets_the_advice(kvm, knobs):
    start, stop, _ = kvm
    g = start("hpt-memfd", "memory-backend-memfd,id=mem0,size=2G,share=on")
    report, _ = check_json("--db", "qemu", "--profile", "kvm-host")
    i = _guest(report, "hpt-memfd")
    assert i["backing"] in ("4k", "thp")
    f = _codes(report, i["id"])["qemu.hugepages.none"]
    assert "<page size='1' unit='G'/>" in f["rationale"]
    assert "hugepagesz=1G hugepages=2" in f["rationale"]
    stop(g)
