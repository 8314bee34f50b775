"""Conformance of every registered engine, and third-party registration."""

import builtins
import os

import pytest

from hpadvise import host, plan
from hpadvise.engines import Engine, Instance, Targets, registry
from hpadvise.procs import ProcTable
from hpadvise.sysroot import SysRoot


@pytest.fixture
def no_live_fs(monkeypatch):
    """Fail the test if anything opens or lists the real /proc, /sys or /etc."""
    real_open, real_listdir = builtins.open, os.listdir

    def guard(path):
        p = os.fspath(path) if not isinstance(path, int) else ""
        if isinstance(p, bytes):
            p = p.decode()
        if p.startswith(("/proc", "/sys", "/etc")):
            raise AssertionError(f"touched the live system: {p}")

    def g_open(file, *a, **k):
        guard(file)
        return real_open(file, *a, **k)

    def g_listdir(path="."):
        guard(path)
        return real_listdir(path)

    monkeypatch.setattr(builtins, "open", g_open)
    monkeypatch.setattr(os, "listdir", g_listdir)


def test_postgres_is_registered_through_entry_points():
    assert "postgres" in registry.names()


@pytest.mark.parametrize("name", registry.names())
def test_engine_conformance(name, tmp_path, hosts, no_live_fs):
    eng = registry.get(name)
    assert isinstance(eng, Engine)
    assert eng.name == name and eng.description and eng.process_names
    assert (eng.__doc__ or "").strip(), "the docstring is the user documentation"
    for key, spec in eng.profile_schema.items():
        assert len(spec) == 3, key
    (tmp_path / "proc").mkdir()
    sr = SysRoot(tmp_path)
    facts = host.collect(SysRoot(hosts / "no-pools"))
    assert eng.discover(facts, ProcTable(sr), Targets()) == []


def test_discovery_on_a_snapshot_does_not_touch_the_live_host(hosts, no_live_fs):
    sr = SysRoot(hosts / "pg-hugetlb")
    facts = host.collect(sr)
    found = registry.get("postgres").discover(facts, ProcTable(sr), Targets())
    assert len(found) == 2


class ToyEngine(Engine):
    """A throwaway third-party engine."""
    name = "toy"
    description = "toy"
    process_names = ("toyd",)
    profile_schema = {"flavour": (str, ("sweet", "sour"), "sweet")}

    def discover(self, host, procs, targets):
        i = Instance("toy", "toy:1", "toy", True)
        from hpadvise.engines import Demand
        i.demand = Demand("toy:1", None, 2048, {2048: 10}, True, "toy")
        return [i]


def test_third_party_engine_takes_part_in_the_plan(hosts):
    registry.register(ToyEngine)
    try:
        r = plan.inspect(SysRoot(hosts / "no-pools"), engine_names=["toy"])
        assert [i.id for i in r.instances] == ["toy:1"]
        assert r.pools[0].demand_pages == 10
    finally:
        registry.unregister("toy")
    assert "toy" not in registry.names()
