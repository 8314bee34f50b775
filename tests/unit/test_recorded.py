"""What an apply records per instance in its journal, the plan keeping it for a stopped
instance, and rollback leaving a stopped server stopped: the core's part, engine-independent
(a throwaway engine registered inline)."""

import shutil

import pytest

from hpadvise.act import apply
from hpadvise.facts import host
from hpadvise.ledger import journal
from hpadvise.planning import plan
from hpadvise.api import profiles
from hpadvise.changes.actions import Restart
from hpadvise.api.engines import Demand, Engine, Instance, registry
from hpadvise.api.model import Recorded
from hpadvise.ledger.recorded import for_header, for_stopped
from hpadvise.facts.sysroot import SysRoot

STARTS: list[str] = []  # what ToyRestart.set started
RUNNING = {"toy:1": True}


class ToyRestart(Restart):
    kind = "toy_restart"

    @property
    def label(self):
        return f"restart {self.instance}"

    def set(self, value=True):
        STARTS.append(self.instance)

    def running(self):
        return RUNNING.get(self.instance)


class Toy(Engine):
    name = "toy"
    description = "a throwaway engine: named by its data directory (its label)"
    action_kinds = (ToyRestart,)

    def discover(self, host, procs, targets):
        return []

    def references(self, inst):
        return (inst.label,)

    def needs_pages_at_start(self, inst):
        return True


@pytest.fixture
def toy():
    registry.register(Toy)
    STARTS.clear()
    try:
        yield {"toy": Toy()}
    finally:
        registry.unregister("toy")


def inst(iid, datadir, pages, running, found=None):
    i = Instance("toy", iid, datadir, running, found=found)
    i.demand = Demand(iid, None, 2048, {2048: pages}, True, "its files")
    return i


def build(hosts, insts, engines, recorded=None):
    prof = profiles.load("oltp", registry.profile_schemas())
    return plan.build(host.collect(SysRoot(hosts / "no-pools")), insts, prof, engines,
                      recorded)


def test_a_stopped_instance_keeps_what_the_active_apply_recorded(hosts, toy):
    a = inst("toy:/data/a", "/data/a", 72, False, found="an earlier apply's journal")
    b = inst("toy:5434", "/data/b", 72, True)
    rec = {a.id: Recorded("20260101-000000-1", "toy:5433", {2048: 537})}
    r = build(hosts, [a, b], toy, rec)
    p = r.placements[a.id]
    assert (p.status, p.pages, p.recorded_by, p.configured_pages) == \
        ("kept", 537, "20260101-000000-1", 72)
    why = ("kept for toy:/data/a: the active apply 20260101-000000-1 recorded 537 pages; "
           "its files say 72")
    assert why in p.reason
    [pool] = r.pools
    assert pool.demand_pages == 537 + 72
    assert why in r.pool_change(2048).reason
    [f] = [f for f in r.findings if f.code == "pool.kept"]
    assert "537" in f.title
    # without the record: its files' count, as before
    assert build(hosts, [a, b], toy).pools[0].demand_pages == 72 + 72
    # what apply --instance plans for another instance keeps it too
    from hpadvise.planning.pipeline import Survey, plan_for, plan_of
    assert plan_for(r, [b]).pools[0].demand_pages == 537 + 72
    # and apply's plan, built once from what was read (no report of every instance first)
    s = Survey(SysRoot(hosts / "no-pools"), r.host, r.profile, toy, [a, b], rec, {}, [], [])
    once = plan_of(s, [b])
    assert once.pools[0].demand_pages == 537 + 72 and once.placements[a.id].status == "kept"
    # a stopped instance whose start takes no huge pages is left out of it altogether
    c = inst("toy:/data/c", "/data/c", 0, False, found="its data directory")
    c.demand = None
    assert [i.id for i in plan_of(Survey(s.sr, r.host, r.profile, toy, [a, b, c], rec, {},
                                         [], []), [b]).instances] == [b.id, a.id]


def test_only_a_stopped_instance_below_its_record(hosts, toy):
    named = inst("toy:/data/a", "/data/a", 72, False)  # stopped, named (--pgdata): planned
    running = inst("toy:5434", "/data/b", 72, True)
    bigger = inst("toy:/data/c", "/data/c", 600, False, found="a layout")
    rec = {i.id: Recorded("J", "x", {2048: 537}) for i in (named, running, bigger)}
    r = build(hosts, [named, running, bigger], toy, rec)
    assert r.placements[named.id].pages == 537 and r.placements[named.id].status == "pool"
    assert r.placements[running.id].pages == 72 and not r.placements[running.id].recorded_by
    assert r.placements[bigger.id].pages == 600 and not r.placements[bigger.id].recorded_by
    other_size = {named.id: Recorded("J", "x", {1048576: 3})}
    assert build(hosts, [named], toy, other_size).placements[named.id].pages == 72


def journal_with(d, jid, pages, rolled_back=False):
    j = journal.Journal(str(d / f"{jid}.jsonl"), {"type": "apply", "id": jid, "time": 0,
                                                  "argv": [], **pages})
    j._append(j.header)
    if rolled_back:
        j.mark_rolled_back([])
    return j


def test_the_newest_active_apply_that_planned_it(tmp_path, toy):
    d = tmp_path / "journal"
    d.mkdir()
    rec = {"instance": "toy:5433", "engine": "toy", "refs": ["/data/a"]}
    journal_with(d, "20260101-000000-1", {})  # written before applies recorded pages
    journal_with(d, "20260101-000001-1", {"pages": [{**rec, "pages": {"2048": 300}}]})
    journal_with(d, "20260101-000002-1", {"pages": [{**rec, "pages": {"2048": 537}}]})
    journal_with(d, "20260101-000003-1", {"pages": [{**rec, "pages": {"2048": 999}}]},
                 rolled_back=True)
    journal_with(d, "20260101-000004-1", {"pages": [{**rec, "instance": "toy:7",
                                                     "refs": ["/data/z"],
                                                     "pages": {"2048": 5}}, "garbage"]})
    a = inst("toy:/data/a", "/data/a", 72, False)
    by_id = inst("toy:5433", "/elsewhere", 72, False)
    running = inst("toy:9", "/data/a", 72, True)
    got = for_stopped(str(d), [a, by_id, running], toy)
    assert got[a.id] == Recorded("20260101-000002-1", "toy:5433", {2048: 537})
    assert got[by_id.id].pages == {2048: 537}  # the same ID
    assert running.id not in got
    assert for_stopped(str(tmp_path / "none"), [a], toy) == {}
    journal_with(d, "20260101-000005-1", {"pages": [{**rec, "pages": {"2048": "x"}}]})
    assert for_stopped(str(d), [a], toy)[a.id].pages == {2048: 537}  # a damaged one: the next


def test_apply_records_what_it_planned(hosts, tmp_path, toy):
    root = tmp_path / "host"
    shutil.copytree(hosts / "thp-always", root, symlinks=True)
    i = inst("toy:5433", "/data/a", 537, False)
    prof = profiles.load("oltp", registry.profile_schemas())
    r = plan.build(host.collect(SysRoot(root)), [i], prof, toy)
    assert for_header(r, [i]) == [{"instance": "toy:5433", "engine": "toy",
                                   "refs": ["/data/a"], "pages": {"2048": 537}}]
    ap = apply.prepare(r, toy, restart=False, persist=False, sys_root=str(root))
    res = apply.execute(ap, str(tmp_path / "journal"), {"argv": ["apply"]})
    j = journal.find(str(tmp_path / "journal"), res.journal)
    assert j.header["pages"] == for_header(r, [i]) and j.header["argv"] == ["apply"]
    done, errors = journal.rollback(j)  # and it rolls back as ever
    assert not errors and done


def restart_journal(d, done=True):
    d.mkdir()
    j = journal.Journal.create(str(d), {"argv": ["apply"]})  # no "pages": an older journal
    a = ToyRestart(engine="toy", instance="toy:1")
    e = j.intent(a, None, True)
    if done:
        j.done(e, "on 2 MiB huge pages")
    return journal.Journal.load(j.path)


def test_rollback_does_not_start_a_stopped_server(tmp_path, toy):
    note = "toy:1 is stopped: its restored settings take effect at its next start"
    RUNNING["toy:1"] = False
    j = restart_journal(tmp_path / "j1")
    assert journal.plan_rollback(j) == [note]
    done, errors = journal.rollback(j)
    assert done == [note] and not errors and STARTS == []
    # running: restarted as ever
    RUNNING["toy:1"] = True
    assert journal.plan_rollback(j) == ["restart toy:1"]
    done, errors = journal.rollback(j)
    assert done == ["restart toy:1"] and STARTS == ["toy:1"]
    # killed during apply's restart: that restart may have left it down, so it is started
    RUNNING["toy:1"] = False
    j = restart_journal(tmp_path / "j2", done=False)
    journal.rollback(j)
    assert STARTS == ["toy:1", "toy:1"]
    # likewise a rollback killed while it restarted it: the next one starts it
    j = restart_journal(tmp_path / "j3")
    j.restarting(j.entries[0])  # what rollback journals before it restarts, then killed
    j = journal.Journal.load(j.path)
    assert journal.plan_rollback(j) == ["restart toy:1"]
    journal.rollback(j)
    assert STARTS == ["toy:1", "toy:1", "toy:1"]


def test_an_instance_only_the_journal_knows_keeps_its_pages(tmp_path, hosts, toy):
    """A server its engine does not find now (stopped, and not looked for when stopped):
    the active apply's record makes it a stopped instance whose pages the pool keeps; found
    under its ID or its data directory it is not made up twice; a socket's path is no
    server's own (a server in a root of its own names the host's socket path too)."""
    from hpadvise.ledger.recorded import absent
    d = tmp_path / "journal"
    d.mkdir()
    datadir = tmp_path / "data"
    datadir.mkdir()
    journal_with(d, "20260101-000001-1", {"pages": [
        {"instance": "toy:3307", "engine": "toy", "refs": ["/run/mysqld/mysqld.sock"],
         "pages": {"2048": 528}},
        {"instance": "toy:5433", "engine": "toy", "refs": [str(datadir)],
         "pages": {"2048": 537}},
        {"instance": "gone:1", "engine": "gone", "refs": [], "pages": {"2048": 9}}]})
    host_server = inst("toy:3306", "/run/mysqld/mysqld.sock", 198, True)
    by_dir = inst("toy:/moved", str(datadir), 72, False)
    [a] = absent(str(d), [host_server, by_dir], toy)
    assert (a.id, a.running, a.found) == ("toy:3307", False, "the active apply 20260101-000001-1")
    assert a.demand.pages == {2048: 528} and a.demand.exact
    r = build(hosts, [host_server, a], toy)
    assert r.placements[a.id].status == "kept" and r.placements[a.id].pages == 528
    assert r.pools[0].demand_pages == 528 + 198
    assert absent(str(d), [host_server, by_dir, inst("toy:3307", "/x", 1, True)], toy) == []


def test_a_record_of_an_id_that_named_a_process_is_not_kept(tmp_path):
    """A JVM is known by its PID: once that process is gone, its successor is a new instance,
    and the apply's record of the old one must not keep pages as if it were stopped."""
    from hpadvise.plugins.jvm import JvmEngine
    from hpadvise.ledger.recorded import absent
    d = tmp_path / "j"
    d.mkdir(mode=0o700)
    recs = [{"instance": "jvm:4242", "engine": "jvm", "refs": [], "pages": {"2048": 600},
             "outlives_process": False},
            {"instance": "jvm:named", "engine": "jvm", "refs": [], "pages": {"2048": 10}}]
    journal.Journal.create(str(d), {"argv": ["apply"], "pages": recs})
    found = absent(str(d), [], {"jvm": JvmEngine()})
    assert [i.id for i in found] == ["jvm:named"]  # an older record, without the key: kept
    # what apply writes: the JVM's record says its ID named the process
    inst = Instance("jvm", "jvm:77", "java", True, pid=77)
    assert JvmEngine().outlives_process(inst) is False
