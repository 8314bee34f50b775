"""The kernel's own share in a static pool: a hugetlb_cma= area grants gigantic pages at
runtime (and is the only way once it is set), HVO gives struct pages back and can make a
shrink stop short, and free gigantic pages can be demoted in place."""

import dataclasses

from hpadvise.facts import host
from hpadvise.planning import plan
from hpadvise.api import profiles
from hpadvise.api.engines import Demand, Instance, registry
from hpadvise.facts.hugetlb_kernel import cma_bytes, cma_pages, hvo, hvo_on, vmemmap_saved_kb
from hpadvise.facts.sysroot import SysRoot

GB, MB2 = 1048576, 2048


def _jvm(split: dict[int, int]) -> Instance:
    i = Instance("test", "jvm", "jvm", False)
    i.demand = Demand("jvm", None, max(split), dict(split), True, "test", False,
                      split=dict(split))
    return i


def _profile():
    return dataclasses.replace(profiles.load("oltp", registry.profile_schemas()),
                               os_floor_pct=0)


def _host(hosts, state="no-pools", cma_kb=None, **params):
    h = host.collect(SysRoot(hosts / state))
    return dataclasses.replace(h, cmdline_params=tuple(params.items()),
                               mem=dataclasses.replace(h.mem, cma_total_kb=cma_kb))


def test_vmemmap_and_cma_arithmetic():
    # sysctl/vm.rst: "7 pages per 2MB HugeTLB page and 4095 pages per 1GB HugeTLB page"
    assert vmemmap_saved_kb(MB2) == 7 * 4 and vmemmap_saved_kb(GB) == 4095 * 4
    assert vmemmap_saved_kb(64) == 0  # a 64 KiB page's 16 struct pages fit in one page
    assert cma_bytes("4G") == 4 << 30 and cma_bytes("0:2G,1:3G") == 5 << 30
    assert cma_bytes("lots") == 0 and cma_bytes(None) == 0
    assert hvo_on(1, {}) and not hvo_on(0, {"hugetlb_free_vmemmap": "on"})
    assert hvo_on(None, {"hugetlb_free_vmemmap": "on"}) and not hvo_on(None, {})


def test_a_cma_area_grants_gigantic_pages_at_runtime(hosts):
    r = plan.build(_host(hosts, cma_kb=8 << 20, hugetlb_cma="8G"), [_jvm({GB: 4})], _profile(), {})
    (pool,) = r.pools
    assert pool.feasibility != "boot_reservation" and "hugetlb_cma" in pool.feasibility_reason
    assert not [f for f in r.findings if f.code == "pool.gigantic_runtime"]
    # too small an area: boot allocation is skipped with it, so the area must grow
    r = plan.build(_host(hosts, cma_kb=2 << 20, hugetlb_cma="2G"), [_jvm({GB: 4})], _profile(), {})
    (pool,) = r.pools
    assert pool.feasibility == "boot_reservation" and "hugetlb_cma=4G" in pool.feasibility_reason
    [f] = [f for f in r.findings if f.code == "pool.gigantic_runtime"]
    assert "2 1 GiB pages short" in f.title
    # without one: a boot reservation, as before
    r = plan.build(_host(hosts), [_jvm({GB: 4})], _profile(), {})
    assert r.pools[0].feasibility == "boot_reservation"
    assert "hugepagesz=1G hugepages=4" in r.pools[0].feasibility_reason
    # asked for on a kernel without CMA (no CmaTotal): ignored by it, and said so
    r = plan.build(_host(hosts, hugetlb_cma="8G"), [_jvm({GB: 4})], _profile(), {})
    assert r.pools[0].feasibility == "boot_reservation"
    [f] = [f for f in r.findings if f.code == "pool.gigantic_runtime"]
    assert "ignored the hugetlb_cma=" in f.rationale


def test_hvo_gives_struct_pages_back_to_the_os(hosts):
    h = _host(hosts)
    on = dataclasses.replace(h, sysctls={**h.sysctls, "vm.hugetlb_optimize_vmemmap": 1})
    r = plan.build(on, [_jvm({MB2: 1000})], _profile(), {})
    [f] = [f for f in r.findings if f.code == "pool.hvo"]
    target = r.pools[0].target_pages
    assert f"{target * 28 / 1024:.1f} MiB" in f.title
    off = dataclasses.replace(h, sysctls={**h.sysctls, "vm.hugetlb_optimize_vmemmap": 0})
    assert not [f for f in plan.build(off, [_jvm({MB2: 1000})], _profile(), {}).findings
                if f.code == "pool.hvo"]


def test_free_gigantic_pages_are_named_for_demotion(hosts):
    """The captured host holds one free 1 GiB page; a plan that needs none of it and 600
    2 MiB pages names the in-place split."""
    h = host.collect(SysRoot(hosts / "pool-1g"))
    r = plan.build(h, [_jvm({MB2: 600})], _profile(), {})
    [f] = [f for f in r.findings if f.code == "pool.demote"]
    assert "echo 2048kB > /sys/kernel/mm/hugepages/hugepages-1048576kB/demote_size" \
        in f.rationale and "echo 1 > " in f.rationale and "512 2 MiB pages" in f.rationale
    # a plan that needs the gigantic page keeps it whole
    r = plan.build(h, [_jvm({GB: 1, MB2: 600})], _profile(), {})
    assert not [f for f in r.findings if f.code == "pool.demote"]


def test_debian_13s_kernel_as_the_guest_lab_captured_it():
    """tests/fixtures/guests/amd64-trixie-cma: Debian 13's 6.12 booted with hugetlb_cma=2G,
    hugetlb_free_vmemmap=on and thp_anon=64K:always (tests/integration/test_trixie_guest.py).
    Built without CMA, it ignored hugetlb_cma=: no gigantic page is counted from it."""
    from pathlib import Path
    snap = Path(__file__).resolve().parent.parent / "fixtures" / "guests" / "amd64-trixie-cma"
    h = host.collect(SysRoot(snap))
    assert h.kernel.startswith("6.12.") and dict(h.cmdline_params)["hugetlb_cma"] == "2G"
    assert h.mem.cma_total_kb is None and cma_pages(h, GB) == 0
    assert hvo(h) and h.thp.mthp[64]["enabled"] == "always"
    r = plan.build(h, [_jvm({GB: 2})], _profile(), {})
    assert r.pools[0].feasibility == "boot_reservation"
    [f] = [f for f in r.findings if f.code == "pool.gigantic_runtime"]
    assert "ignored the hugetlb_cma=" in f.rationale


def test_debian_sids_kernel_with_a_working_area():
    """tests/fixtures/guests/amd64-sid-cma: Debian sid's 7.2 booted with hugetlb_cma=2G
    (tests/integration/test_sid_guest.py). Built with CMA, it reserved the area: two 1 GiB
    pages are runtime capacity, a third is the area's shortfall."""
    from pathlib import Path
    snap = Path(__file__).resolve().parent.parent / "fixtures" / "guests" / "amd64-sid-cma"
    h = host.collect(SysRoot(snap))
    assert h.kernel.startswith("7.2.") and dict(h.cmdline_params)["hugetlb_cma"] == "2G"
    assert h.mem.cma_total_kb == 2 * GB and cma_pages(h, GB) == 2
    r = plan.build(h, [_jvm({GB: 2})], _profile(), {})
    assert r.pools[0].feasibility == "fits" and "hugetlb_cma= area" in \
        r.pools[0].feasibility_reason
    r = plan.build(h, [_jvm({GB: 3})], _profile(), {})
    assert r.pools[0].feasibility == "boot_reservation"
    [f] = [f for f in r.findings if f.code == "pool.gigantic_runtime"]
    assert "area is 1 1 GiB pages short" in f.title
