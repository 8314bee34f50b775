"""arm64 page geometry in a real kernel: Debian 12's arm64 kernel (4 KiB granule) booted under
QEMU's emulation (scripts/guest.sh; its image takes about 16 minutes to build once, through
qemu-user-static). Inside, tests/guests/arm64_lab.py reads the kernel's sizes, runs PostgreSQL
15 on 2 MiB and on 32 MiB pages through check, apply --restart and rollback, probe, and a JVM
on 32 MiB large pages.

Behind the `arm64_guest` marker (not in the default run, which deselects it):
    .venv/bin/python -m pytest -m arm64_guest tests/integration/test_arm64_guest.py
Its recorded run: lab/README.md, "arm64 page geometry in a real kernel"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from support import REPO

pytestmark = pytest.mark.arm64_guest

GUEST = REPO / "scripts" / "guest.sh"
DEPS = ("typer", "rich", "shellingham", "markdown-it-py", "mdurl", "pygments",
        "typing-extensions", "annotated-doc")
MB, GB = 1024, 1024 * 1024


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    from importlib import metadata
    if os.geteuid() != 0:
        pytest.skip("the guest lab builds its image with debootstrap: needs root")
    for tool in ("qemu-system-aarch64", "debootstrap", "qemu-aarch64-static", "javac"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} not found: apt-get install qemu-system-arm qemu-user-static "
                        "debootstrap default-jdk-headless")
    b = subprocess.run([str(GUEST), "build", "arm64"], capture_output=True, text=True,
                       timeout=3600)
    assert b.returncode == 0, b.stderr[-2000:]
    share = tmp_path_factory.mktemp("arm64-guest")
    pins = [f"{n}=={metadata.version(n)}" for n in DEPS if _has(n)]
    for args in (["install", "--target", str(share / "pylib"), str(REPO), *pins],
                 ["download", "-d", str(share / "wheels"), "--only-binary=:all:",
                  "--platform", "manylinux2014_aarch64", "--python-version", "3.11",
                  "numpy<2.3"]):
        pip = subprocess.run([sys.executable, "-m", "pip", *args[:1], "-q", "--no-deps",
                              "--disable-pip-version-check", *args[1:]], capture_output=True,
                             text=True, timeout=600, cwd=share)
        assert pip.returncode == 0, pip.stderr[-2000:]
    for whl in (share / "wheels").glob("*.whl"):
        zipfile.ZipFile(whl).extractall(share / "pylib")
    j = subprocess.run(["javac", "--release", "17", "-d", str(share),
                        str(REPO / "tests" / "guests" / "Sleep.java")], capture_output=True,
                       text=True)
    assert j.returncode == 0, j.stderr
    for f in ("arm64_lab.py", "guestlab.py"):
        shutil.copy(REPO / "tests" / "guests" / f, share / f)
    (share / "run.sh").write_text("export PYTHONPATH=/share/pylib\n"
                                  "python3 /share/arm64_lab.py\n")
    r = subprocess.run([str(GUEST), "run", "arm64", str(share), "-m", "4G", "-smp", "2"],
                       capture_output=True, text=True, timeout=2400)
    out = (share / "out.log").read_text() if (share / "out.log").exists() else ""
    assert r.returncode == 0, r.stderr[-2000:] + out[-3000:]
    result = json.loads((share / "result.json").read_text())
    for case, v in result.items():
        assert "error" not in v, (case, v)
    return result


def _has(name: str) -> bool:
    from importlib import metadata
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def test_the_kernels_geometry(lab):
    g = lab["geometry"]
    assert g["machine"] == "aarch64" and g["page_size"] == 4096
    assert g["hugetlb_sizes"] == ["hugepages-1048576kB", "hugepages-2048kB",
                                  "hugepages-32768kB", "hugepages-64kB"]
    assert g["pmd_size"] == 2 << 20 and g["default"] == "2048"
    # hugetlb cgroup files name 64 KiB as the kernel's mem_fmt() does
    assert {"hugetlb.64KB.max", "hugetlb.2MB.max", "hugetlb.32MB.max",
            "hugetlb.1GB.max"} <= set(g["cgroup_files"])


def _exact_apply_rollback(case: dict, kb: int) -> None:
    own = int(case["server_count"])
    assert case["check"]["rc"] == 0, case["check"]["stderr"]
    d = case["check"]["demand"]
    assert d["page_kb"] == kb and d["pages"][str(kb)] == own and d["exact"], d
    assert case["apply"]["rc"] == 0, case["apply"]
    assert case["after_apply"]["pools"][f"{kb}kB"] >= own
    assert case["after_apply"]["maps"] == {str(kb): own * kb}, case["after_apply"]["maps"]
    rb = case["rollback"]
    assert rb["rc"] == 0 and rb["json"]["errors"] == [], rb
    assert set(case["after_rollback"]["pools"].values()) == {0}
    assert not case["after_rollback"]["maps"]


def test_postgres_on_2mib_pages_exact(lab):
    _exact_apply_rollback(lab["pg2m"], 2 * MB)


def test_postgres_on_32mib_pages_exact_and_persisted(lab):
    c = lab["pg32m"]
    _exact_apply_rollback(c, 32 * MB)
    # 32 MiB pages are gigantic here (above the buddy allocator's 4 MiB blocks): planned as a
    # boot reservation, and persisted for the next boot with the kernel's spelling
    (pool,) = [p for p in c["check"]["pools"] if p["size_kb"] == 32 * MB]
    assert pool["feasibility"] == "boot_reservation"
    assert "hugepages-32768kB" in c["after_apply"]["persisted"]


def test_probe_measures_the_guests_sizes(lab):
    p = lab["probe"]
    assert p["rc"] == 0, p["stderr"]
    names = [v[0] for v in p["variants"]]
    assert names == ["4 KiB", "2 MiB THP", "64 KiB hugetlb", "2 MiB hugetlb",
                     "32 MiB hugetlb", "1 GiB hugetlb"]
    for name, kb, ns, skipped, backing in p["variants"]:
        if "hugetlb" in name:
            assert ns is not None or "granted" in (skipped or ""), (name, skipped)
            if ns is not None:
                assert backing == f"KernelPageSize {kb} kB"
    assert set(p["pools_after"].values()) == {0}


def test_jvm_on_32mib_pages_counted_per_region(lab):
    """What the JVM mapped on each size (its smaps) is what check says it holds, per size;
    its heap on 32 MiB pages."""
    j = lab["jvm"]
    assert j["check"]["rc"] in (0, 1), j["check"]["stderr"]
    mapped = {k: kb // int(k) for k, kb in j["smaps"].items()}
    assert mapped.get("32768") == 16, j["smaps"]  # the 512 MiB heap
    held = j["check"]["demand"]["held_split"]
    assert {k: v for k, v in held.items() if v} == mapped, (held, mapped)
    assert "Heap:  min=512M max=512M" in j["pagesize_log"] and "page_size=32M" in j["pagesize_log"]
    assert set(j["pools_after"].values()) == {0}
