"""Decisions are made once, in the plan, and carried as data: rewording every finding title
changes nothing any view decides. The plan is built on captured hosts twice, once with every
title as declared and once with every title rewritten, and everything the views read (the
placements, the pools and their feasibility, the changes, what `size` judges, what `apply`
would do, what `k8s` prints, the JSON report but for the titles) must come out the same."""

import dataclasses

import pytest

from hpadvise.act import apply
from hpadvise.kit import findings
from hpadvise.outputs import k8s, render, whatif
from hpadvise.planning import pipeline, plan
from hpadvise.api import profiles
from hpadvise.api.engines import Demand, Instance, registry
from hpadvise.facts.host import collect
from hpadvise.facts.procs import ProcTable
from hpadvise.facts.sysroot import SysRoot
from hpadvise.kit.knob_id import KnobId


def _inst(iid, pages_2m, pages_1g=None, page_kb=2048):
    pages = {2048: pages_2m}
    if pages_1g is not None:
        pages[1048576] = pages_1g
    i = Instance("test", iid, iid, False)
    i.demand = Demand(iid, None, page_kb, pages, True, "test", pages_1g is not None)
    return i


# (fixture state, instances made by hand or None for the instances captured in the tree)
CASES = [
    ("no-pools", lambda: [_inst("a", 600), _inst("b", 40)]),        # fits
    ("fragmented", lambda: [_inst("frag", 2000)]),                  # fragmented: boot
    ("no-pools", lambda: [_inst("gig", 4600, 9, page_kb=1048576)]),  # 1 GiB: boot
    ("no-pools", lambda: [_inst("big", 10000)]),                    # OS floor: does not fit
    ("pool-2m", lambda: [_inst("small", 30)]),                      # already there
    ("pg-cgroup-v2", None),                                         # held back by its cgroup
    ("pg-hugetlb", None),
    ("mariadb-jvm", None),
    ("thp-always", None),
    ("zgc-thp", None),                                              # shmem THP user kept
    ("mthp-always", None),                                          # a per-size override
]


def _reword(monkeypatch):
    orig = findings.Code.__call__

    def reworded(self, *a, **kw):
        f = orig(self, *a, **kw)
        return dataclasses.replace(f, title="reworded: " + f.title[::-1].upper())
    monkeypatch.setattr(findings.Code, "__call__", reworded)


def _views(root, make):
    """Everything the views decide, from one plan."""
    if make is None:
        r = pipeline.inspect(SysRoot(root))
    else:
        prof = profiles.load("oltp", registry.profile_schemas())
        r = plan.build(collect(SysRoot(root)), make(), prof, {})
    d = render.to_dict(r)
    d["findings"] = [dict(f, title=None) for f in d["findings"]]
    d.pop("hpadvise_version")
    d.pop("checked_at")
    try:
        ap = apply.prepare(r, r.engines, restart=True, persist=False, read_only=True,
                           sys_root=str(root))
        steps = [(s.action.label, repr(s.new), s.phase, s.why) for s in ap.steps]
    except Exception as exc:  # a blocked plan: the refusal is a decision too
        steps = [str(exc)]
    snippets = [k8s.snippet(r, ProcTable(SysRoot(root)), i, 2) for i in r.instances]
    return {"report": d, "verdicts": [dataclasses.asdict(v) for v in whatif.verdicts(r)],
            "apply": steps, "k8s": snippets}


@pytest.mark.parametrize("state,make", CASES)
def test_reworded_titles_change_no_decision(hosts, monkeypatch, state, make):
    before = _views(hosts / state, make)
    _reword(monkeypatch)
    after = _views(hosts / state, make)
    assert after == before
    r = pipeline.inspect(SysRoot(hosts / state)) if make is None else None
    if r is not None:  # the rewording did reach the titles
        assert all(f.title.startswith("reworded: ") for f in r.findings)


def test_the_cases_cover_every_decision(hosts):
    """The cases above reach every placement and every feasibility, so the test above
    compares each kind of decision."""
    places, feas = set(), set()
    prof = profiles.load("oltp", registry.profile_schemas())
    for state, make in CASES:
        r = pipeline.inspect(SysRoot(hosts / state)) if make is None else \
            plan.build(collect(SysRoot(hosts / state)), make(), prof, {})
        places |= {p.status for p in r.placements.values()}
        feas |= {p.feasibility for p in r.pools}
    assert feas == {"fits", "boot_reservation", "does_not_fit"}
    assert {"pool", "held_back"} <= places


def test_size_reads_the_feasibility_the_plan_decided(hosts):
    prof = profiles.load("oltp", registry.profile_schemas())
    for (state, make), word in zip(CASES, ("fits", "fits after a boot-time reservation",
                                           "fits after a boot-time reservation",
                                           "does not fit")):
        r = plan.build(collect(SysRoot(hosts / state)), make(), prof, {})
        assert {v.verdict for v in whatif.verdicts(r)} == {word}
        assert {p.feasibility_reason for p in r.pools} != {""}


def test_changes_are_typed(hosts):
    r = pipeline.inspect(SysRoot(hosts / "thp-always"))
    thp = {c.knob: c for c in r.changes if c.kind == "thp"}
    assert set(thp) == {"enabled", "defrag", "shmem_enabled"}
    assert all(c.id == KnobId.thp(k) and c.id.key == f"thp.{k}" for k, c in thp.items())
    prof = profiles.load("oltp", registry.profile_schemas())
    r = plan.build(collect(SysRoot(hosts / "no-pools")), [_inst("a", 100)], prof, {})
    [pool] = [c for c in r.changes if c.kind == "pool"]
    assert pool.size_kb == 2048 and pool.id == KnobId.pool(2048) and pool.at_boot == "0"
    assert r.placements["a"].pooled and r.placements["a"].pages == 100
