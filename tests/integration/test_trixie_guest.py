"""Linux 6.12 as Debian 13 ships it, booted under QEMU's emulation (scripts/guest.sh with
HPADVISE_GUEST_SUITE=trixie) with a CMA area for gigantic pages (hugetlb_cma=2G), HugeTLB
Vmemmap Optimization (hugetlb_free_vmemmap=on) and a per-size THP mode at boot (thp_anon=).
Inside, tests/guests/kernel_lab.py records what the kernel made of each, what hpadvise plans
for a 1 GiB pool, and what the kernel grants; a snapshot of the guest is kept as the fixture
tests/fixtures/guests/amd64-trixie-cma (read by tests/unit/test_hugetlb_kernel.py).

Behind the `kernel_guest` marker (its image builds in about 5 minutes, once; the default run
deselects it):
    .venv/bin/python -m pytest -m kernel_guest tests/integration/test_trixie_guest.py
Its recorded run: lab/README.md, "Linux 6.12 with a CMA area, HVO and thp_anon"."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "guests"))
from hostside import run_lab  # noqa: E402

pytestmark = pytest.mark.kernel_guest

APPEND = "hugetlb_cma=2G hugetlb_free_vmemmap=on thp_anon=64K:always"
CASES = ("facts", "plan", "cma", "hvo")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the guest lab builds its image with debootstrap: needs root")
    for tool in ("qemu-system-x86_64", "debootstrap"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} not found: run scripts/test.sh, which installs it")
    result = run_lab(tmp_path_factory.mktemp("trixie-guest"), "kernel_lab.py", CASES,
                     ["-m", "6G", "-smp", "2"],
                     {"HPADVISE_GUEST_SUITE": "trixie", "HPADVISE_GUEST_APPEND": APPEND})
    for case, v in result.items():
        assert "error" not in v, (case, v)
    return result


def test_the_kernel_took_the_parameters(lab):
    f = lab["facts"]
    assert f["uname"].startswith("6.12.")
    assert f["hvo_sysctl"] == "1"
    assert f["cma_kb"]["CmaTotal"] >= 2 * 1024 * 1024


def test_a_1gib_pool_is_planned_from_the_cma_area_and_granted(lab):
    (pool,) = [p for p in lab["plan"]["pools"] if p["size_kb"] == 1048576]
    assert "hugetlb_cma" in pool["feasibility_reason"], pool
    assert pool["feasibility"] != "boot_reservation"
    c = lab["cma"]
    assert c["granted"] == 2 and c["released_to"] == 0
    assert c["cma_free_kb"][0] - c["cma_free_kb"][1] == 2 * 1024 * 1024


def test_hvo_frees_struct_pages(lab):
    h = lab["hvo"]
    assert h["granted"] == 400 and h["released_to"] == 0
    # the pool less 28 KiB a page, give or take what the kernel did meanwhile
    assert h["memfree_drop_kb"] < h["pool_kb"] - 400 * 20
