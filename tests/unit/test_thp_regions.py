"""Which of a server's memory can get THP at which sizes, now and under the plan
(thp_regions.py), on captured trees: the same decision (thp_rules.thp_sizes) the plan is made
with, per kind of mapping, per madvise, per process mode."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from hpadvise.facts import host
from hpadvise.planning import pipeline
from hpadvise.facts.sysroot import SysRoot
from hpadvise.planning.thp_regions import Region, read_regions, sizes

THP = "sys/kernel/mm/transparent_hugepage"
FIX = __import__("pathlib").Path(__file__).parents[1] / "fixtures"


def _set(root, name, value):
    p = root / THP / name
    words = p.read_text().replace("[", "").replace("]", "").split()
    p.write_text(" ".join(f"[{w}]" if w == value else w for w in words) + "\n")


def _regions(r, iid):
    return {(g.kind, g.advice): g for i in r.instances if i.id == iid for g in i.thp_regions}


@pytest.mark.parametrize("profile", ["oltp", "jvm", "mixed"])
def test_zgc_heap_is_shared_memory_madvised_and_keeps_its_size(hosts, profile):
    r = pipeline.inspect(SysRoot(hosts / "zgc-thp"), profile)
    g = _regions(r, "jvm:17079")
    heap = g[("shared", "madvise")]  # three views of one 1 GiB memfd, 72 MiB of it on THP
    assert (heap.size_kb, heap.huge_kb) == (3 * 1048576, 73728)
    assert heap.sizes_now == heap.sizes_planned == (2048,)
    assert ("shared", "none") not in g  # every view of the file counts as advised
    assert g[("anonymous", "nohuge")].sizes_now == ()
    assert g[("anonymous", "none")].sizes_now == ()  # enabled = madvise


def test_zgc_heap_under_shmem_never_gets_thp_back_from_the_plan(hosts, tmp_path):
    root = tmp_path / "zgc"
    shutil.copytree(hosts / "zgc-thp", root, symlinks=True)
    for name in ("smaps", "smaps_rollup"):  # restarted under never: nothing on THP
        p = root / "proc/17079" / name
        p.write_text(re.sub(r"ShmemPmdMapped:\s+\d+ kB", "ShmemPmdMapped: 0 kB", p.read_text()))
    _set(root, "shmem_enabled", "never")
    r = pipeline.inspect(SysRoot(root), "oltp")
    heap = _regions(r, "jvm:17079")[("shared", "madvise")]  # the JVM engine knows its memfd
    assert heap.huge_kb == 0 and heap.sizes_now == () and heap.sizes_planned == (2048,)


def test_per_size_override_shows_in_now_and_goes_in_the_plan(hosts):
    # enabled = madvise, hugepages-2048kB/enabled = always: PostgreSQL's private memory gets
    # 2 MiB THP now although nothing madvise()d it; the plan puts the size back to inherit
    r = pipeline.inspect(SysRoot(hosts / "mthp-always"), "oltp")
    g = _regions(r, "postgres:5432")
    assert g[("anonymous", "none")].sizes_now == (2048,)
    assert g[("anonymous", "none")].sizes_planned == ()
    # its shared memory (MAP_SHARED|MAP_ANONYMOUS, /dev/zero) follows shmem_enabled = never
    assert g[("shared", "none")].sizes_now == g[("shared", "none")].sizes_planned == ()


@pytest.mark.parametrize("mode,unadvised,advised", [
    ("inherit", (2048,), (2048,)), ("advised", (), (2048,)), ("never", (), ())])
def test_process_mode_decides_under_always(hosts, mode, unadvised, advised):
    thp = host.collect(SysRoot(hosts / "thp-always")).thp
    got = {g.advice: g for g in read_regions((FIX / "thp_modes" / mode / "smaps").read_text(),
                                             thp)}
    assert sizes(thp, got["none"], mode) == unadvised
    assert sizes(thp, got["madvise"], mode) == advised


def test_hugetlb_and_nohugepage_get_no_thp(hosts):
    thp = host.collect(SysRoot(hosts / "thp-always")).thp
    assert sizes(thp, Region("hugetlb", "none", 2048, 2048), "inherit") == ()
    assert sizes(thp, Region("anonymous", "nohuge", 4096, 0), "inherit") == ()
    r = pipeline.inspect(SysRoot(hosts / "pg-hugetlb"), "oltp")
    g = next(i for i in r.instances if i.thp_regions and any(
        x.kind == "hugetlb" for x in i.thp_regions)).thp_regions
    huge = [x for x in g if x.kind == "hugetlb"][0]
    assert huge.huge_kb > 0 and huge.sizes_now == huge.sizes_planned == ()


def test_regions_in_check_json_and_text(hosts):
    def run(*fmt):
        return subprocess.run([sys.executable, "-m", "hpadvise.cli", "check", "--root",
                               str(hosts / "zgc-thp"), *fmt], capture_output=True, text=True,
                              env={"COLUMNS": "160", "PATH": "/usr/bin:/bin", **{
                                  k: v for k, v in os.environ.items() if k == "PYTHONPATH"}})
    d = json.loads(run("--format", "json").stdout)
    jvm = next(i for i in d["instances"] if i["id"] == "jvm:17079")
    heap = [g for g in jvm["thp_regions"] if g["kind"] == "shared"]
    assert heap == [{"kind": "shared", "advice": "madvise", "size_kb": 3145728,
                     "huge_kb": 73728, "sizes_now": [2048], "sizes_planned": [2048]}]
    text = run().stdout
    line = next(x for x in text.splitlines() if "shared (shmem), madvise()d" in x)
    assert "jvm:17079" in line and "72 MiB" in line and "2 MiB" in line
