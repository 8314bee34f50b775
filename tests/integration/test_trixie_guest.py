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
    return run_lab(tmp_path_factory.mktemp("trixie-guest"), "kernel_lab.py", CASES,
                   ["-m", "6G", "-smp", "2"],
                   {"HPADVISE_GUEST_SUITE": "trixie", "HPADVISE_GUEST_APPEND": APPEND})


def test_what_the_kernel_made_of_each_parameter(lab):
    f = lab["facts"]
    assert f["uname"].startswith("6.12.")
    # thp_anon=: the 64 KiB size always at boot, the others as a fresh kernel has them
    assert f["mthp"]["hugepages-64kB"].startswith("[always]")
    assert "[never]" in f["mthp"]["hugepages-16kB"]
    # HVO on, and the kernel's own figures are the ones hpadvise counts (hugetlb_kernel.py)
    assert f["hvo_sysctl"] == "1"
    log = "\n".join(f["boot_log"])
    assert "28 KiB vmemmap can be freed for a 2.00 MiB page" in log
    assert "16380 KiB vmemmap can be freed for a 1.00 GiB page" in log
    # Debian's kernel has no CMA: hugetlb_cma= is ignored and passed to user space
    assert f["cma_kb"]["CmaTotal"] is None
    assert 'Unknown kernel command line parameters "hugetlb_cma=2G"' in log


def test_the_plan_counts_hvo(lab):
    p = lab["plan"]
    assert p["rc"] == 0, p["stderr"]
    assert p["pools"] and "pool.hvo" in dict(p["findings"])


def test_the_kernel_grants_and_frees_the_pools(lab):
    c, h = lab["cma"], lab["hvo"]
    assert c["granted"] == 2 and c["released_to"] == 0  # a fresh guest: 1 GiB pages at runtime
    assert h["granted"] == 400 and h["released_to"] == 0
