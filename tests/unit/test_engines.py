"""Conformance of every registered engine, and third-party registration."""

import builtins
import json
import os

import pytest

# what an engine sees of the core, as engines import it
from hpadvise.api.face import Action, Codes, Engine, File, FileSetting, Instance, ProcTable, \
    SysRoot, Targets
# the core's own side of the contract
from hpadvise.api.engines import action_from_spec as from_spec
from hpadvise.api.engines import registry
from hpadvise.changes.action_base import ActionError
from hpadvise.changes.actions import KINDS
from hpadvise.facts import host
from hpadvise.kit.findings import CORE
from hpadvise.ledger import journal as jr
from hpadvise.planning import pipeline


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
    assert isinstance(eng.codes, Codes) and eng.codes, "declare the finding codes it raises"
    assert not set(eng.codes) & set(CORE)
    for cls in eng.action_kinds:
        assert cls.kind and cls.kind not in KINDS, cls
        assert cls.shell is not Action.shell, f"{cls.kind}: no shell()"
    if eng.benches:
        assert type(eng).bench_target is not Engine.bench_target
    (tmp_path / "proc").mkdir()
    sr = SysRoot(tmp_path)
    facts = host.collect(SysRoot(hosts / "no-pools"))
    assert eng.discover(facts, ProcTable(sr), Targets()) == []


def _engine_actions(hosts) -> list:
    """(engine, action, value) for every action the plans of the captured trees make."""
    out = []
    for tree in sorted(hosts.iterdir()):
        r = pipeline.inspect(SysRoot(tree))
        for inst in r.instances:
            eng = r.engines[inst.engine]
            out += [(eng, a, v) for a, v in eng.actions(inst, r.changes)]
            ra = eng.restart_action(inst) if inst.running else None
            if ra is not None:
                out.append((eng, ra, True))
            if inst.engine == "postgres" and inst.running:  # capture's, made by no plan
                from hpadvise.plugins.postgres.actions import spec_of
                from hpadvise.plugins.postgres.validate.capture import PgReload
                from hpadvise.plugins.postgres.validate.capture_log import CaptureDir, PgLogSetting
                spec = spec_of(inst.state, inst.id)
                out += [(eng, PgReload(**spec), True),
                        (eng, PgLogSetting("log_statement", "all", **spec), {"value": "all"}),
                        (eng, CaptureDir("/tmp/hpadvise-capture-1-2", "postgres", inst.id),
                         "present")]
    return out


def shell_of(action, value):
    """An action's shell lines, or the one error that says why it has none on this host (a
    restart of a PostgreSQL major whose pg_ctl is not installed here)."""
    try:
        return action.shell(value)
    except ActionError as exc:
        if "found" not in str(exc):  # only a binary this host lacks excuses the lines
            raise
        return f"ActionError: {exc}"


def test_every_engine_action_kind_round_trips_through_the_journal(hosts, tmp_path):
    """Each registered engine's action kinds, made by its own plan on a captured host, survive
    the journal: written, read back, rebuilt by the engine, they are the same action (spec,
    label, instance, shell lines). A file-backed setting is set, verified and restored byte for
    byte on a copy of its file."""
    acts = _engine_actions(hosts)
    seen = {a.kind for _, a, _ in acts}
    for eng in registry.all():
        missing = {c.kind for c in eng.action_kinds} - seen
        assert not missing, f"{eng.name}: no captured tree makes {missing}"
    jdir = tmp_path / "journal"
    jdir.mkdir()
    j = jr.Journal.create(str(jdir), {"argv": ["conformance"]})
    for eng, a, v in acts:
        assert a.instance, f"{a.kind} names no instance"
        assert a.spec()["engine"] == eng.name
        j.done(j.intent(a, None, v), v)
    back = jr.Journal.load(j.path)
    assert len(back.entries) == len(acts)
    for (eng, a, v), e in zip(acts, back.entries):
        b = from_spec(e.spec)
        assert type(b) is type(a) and json.dumps(b.spec()) == json.dumps(a.spec())
        assert (b.label, b.instance) == (a.label, a.instance)
        assert shell_of(b, e.new) == shell_of(a, v) and shell_of(a, v)
        if isinstance(a, FileSetting):
            copy = tmp_path / f"{a.kind}-{e.n}"
            text = SysRoot(_tree_of(hosts, a.file().path)).read(a.file().path, quiet_missing=True)
            if text is not None:
                copy.write_text(text)
            before = copy.read_bytes() if copy.exists() else None
            b.file = lambda copy=copy: File(str(copy))  # the setting, on a copy of its file
            old = b.get()
            # The file path only: an engine's own set() may first try the server itself
            # (ALTER SYSTEM), and the servers of a captured host may be this host's.
            FileSetting.set(b, e.new)
            ok, actual = b.verify(e.new)
            assert ok and not b.same(old, e.new), (a.kind, old, actual)
            b.restore(old)
            assert (copy.read_bytes() if copy.exists() else None) == before


def _tree_of(hosts, path: str):
    """The captured tree that holds `path` (the live root when none does)."""
    for tree in sorted(hosts.iterdir()):
        if (tree / path.lstrip("/")).exists():
            return tree
    return "/"


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
        from hpadvise.api.engines import Demand
        i.demand = Demand("toy:1", None, 2048, {2048: 10}, True, "toy")
        return [i]


def test_third_party_engine_takes_part_in_the_plan(hosts):
    registry.register(ToyEngine)
    try:
        r = pipeline.inspect(SysRoot(hosts / "no-pools"), engine_names=["toy"])
        assert [i.id for i in r.instances] == ["toy:1"]
        assert r.pools[0].demand_pages == 10
    finally:
        registry.unregister("toy")
    assert "toy" not in registry.names()


def test_an_engine_that_fails_costs_only_its_own_instances(hosts):
    """An engine whose discovery raises is a finding and an error line; the other engines'
    instances, the host and the plan stand."""
    class Broken(Engine):
        name = "broken"
        description = "raises in discover"

        def discover(self, host, procs, targets):
            raise RuntimeError("no such thing")
    registry.register(Broken)
    try:
        r = pipeline.inspect(SysRoot(hosts / "pg-hugetlb"), engine_names=["broken", "postgres"])
    finally:
        registry.unregister("broken")
    assert [i.engine for i in r.instances if i.engine == "postgres"]
    assert r.errors == ["broken: discovery failed: no such thing"]
    [f] = [f for f in r.findings if f.code == "engine.failed"]
    assert f.title == "The broken engine could not finish discovering"
