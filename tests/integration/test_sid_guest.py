"""Linux 7.2 as Debian sid ships it (built with CMA), booted under QEMU's emulation
(scripts/guest.sh with HPADVISE_GUEST_SUITE=sid) with a CMA area for gigantic pages
(hugetlb_cma=2G), HugeTLB Vmemmap Optimization (hugetlb_free_vmemmap=on) and a per-size THP mode
at boot (thp_anon=). Inside, tests/guests/kernel_lab.py records what the kernel made of each,
what hpadvise plans for a 1 GiB pool that the area holds and one it does not, what the kernel
grants from the area, the THP modes a process can take, and a PostgreSQL cluster run by
systemd (PID 1) as a unit given a THP mode of its own through its unit's MemoryTHP= (systemd
262). A snapshot of the guest is kept as
tests/fixtures/guests/amd64-sid-cma (read by tests/unit/test_hugetlb_kernel.py).

Behind the `kernel_guest` marker (its image builds in a few minutes, once; the default run
deselects it):
    .venv/bin/python -m pytest -m kernel_guest tests/integration/test_sid_guest.py
Its recorded run: lab/README.md, "Linux 7.2 with a working CMA area"."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "guests"))
from hostside import run_lab  # noqa: E402

pytestmark = pytest.mark.kernel_guest

APPEND = "hugetlb_cma=2G hugetlb_free_vmemmap=on thp_anon=64K:always"
CASES = ("facts", "plan", "plan_cma", "cma", "modes", "unit_thp")
GB_KB = 1048576


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    share = tmp_path_factory.mktemp("sid-guest")
    # 8 GiB: with 6, one boot in three found no room for the 2 GiB area ("cma: Failed to
    # reserve 2048 MiB", CmaTotal 0; hpadvise then planned a boot-time reservation, as it
    # should); lab/README.md has the runs
    out = run_lab(share, "kernel_lab.py", CASES, ["-m", "8G", "-smp", "2"],
                  {"HPADVISE_GUEST_SUITE": "sid", "HPADVISE_GUEST_APPEND": APPEND})
    keep = Path("/tmp/hpadvise-sid-snapshot")  # for the fixture's maintainer to copy
    shutil.rmtree(keep, ignore_errors=True)
    if (share / "snapshot").is_dir():
        shutil.copytree(share / "snapshot", keep, symlinks=True)
    return out


def test_the_kernel_reserved_the_cma_area(lab):
    f = lab["facts"]
    assert f["uname"].startswith("7.")
    assert f["cma_kb"]["CmaTotal"] >= 2 * GB_KB  # the area, beside any DMA one
    log = "\n".join(f["boot_log"])
    assert "Unknown kernel command line parameters" not in log
    assert f["mthp"]["hugepages-64kB"].startswith("[always]")
    assert f["hvo_sysctl"] == "1"


def test_the_plan_counts_the_area(lab):
    fits, short = lab["plan_cma"], lab["plan"]
    assert fits["rc"] == 0, fits["stderr"]
    # 1 GiB pages at runtime: only a CMA area makes them a plan that fits without a boot-time
    # reservation (without one, gigantic pages are planned for the kernel command line)
    [big] = [p for p in fits["pools"] if p["size_kb"] == GB_KB]
    assert big["verdict"] == "fits" and big["how"].startswith("echo "), fits["pools"]
    assert "pool.gigantic_runtime" not in dict(fits["findings"])
    # 3 GiB of buffers want more 1 GiB pages than the area holds: the area must grow
    codes = dict(short["findings"])
    assert "pool.gigantic_runtime" in codes and "short" in codes["pool.gigantic_runtime"]


def test_the_kernel_grants_gigantic_pages_from_the_area(lab):
    c = lab["cma"]
    before, during = c["cma_free_kb"]
    # both 1 GiB pages from the area at runtime: the area has nothing free while they are
    # held (what it held of movable pages before, 2 MiB in one run, was moved out)
    assert c["granted"] == 2 and before > GB_KB and during == 0, c
    assert c["released_to"] == 0


def test_the_advised_only_mode_is_there(lab):
    assert lab["modes"]["supported"] == ["inherit", "never", "advised"], lab["modes"]


def test_a_unit_gets_its_mode_from_memory_thp(lab):
    u = lab["unit_thp"]
    assert u["unit"] == "pglab.service" and u["before"] == "1", u
    assert u["apply_rc"] == 0, u["apply_stderr"]
    assert ("unit_thp" in {k for k, _, _ in u["changes"]}), u["changes"]
    assert "MemoryTHP=disable" in u["dropin"] and u["memory_thp"] == "disable", u
    assert u["restarted"] and u["after"] == "0", u  # the postmaster started with THP off
    assert u["rollback_rc"] == 0, u["rollback_stderr"]
    assert not u["dropin_after"] and u["after_rollback"] == "1", u
