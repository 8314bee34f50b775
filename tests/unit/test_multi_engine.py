"""One plan for a host that runs several engines: THP needs resolved against the profile and
each other, Redis/MongoDB discovered from /proc, JVM flag parsing."""

import dataclasses

from hpadvise.facts import host
from hpadvise.planning import plan
from hpadvise.api import profiles
from hpadvise.api.engines import Instance, registry
from hpadvise.plugins import jvm, kv
from hpadvise.plugins.jvm import flags as jflags
from hpadvise.facts.procs import ProcTable
from hpadvise.facts.sysroot import SysRoot


def facts(hosts, state):
    return host.collect(SysRoot(hosts / state))


def prof(name="oltp"):
    return profiles.load(name, registry.profile_schemas())


def _inst(engine, iid, version=None):
    return Instance(engine, iid, iid, True, pid=1, version=version)


ENGINES = {"redis": kv.RedisEngine(), "mongodb": kv.MongoEngine()}


def _thp_changes(r):
    return {c.target.split("/")[1]: c.recommended for c in r.changes if c.kind == "thp"}


def test_mongodb8_alone_gets_always_with_an_explanation(hosts):
    f = facts(hosts, "no-pools")  # THP enabled=madvise, defrag=madvise
    r = plan.build(f, [_inst("mongodb", "mongodb:27017", "8.0.4")], prof(), ENGINES)
    assert _thp_changes(r) == {"enabled": "always", "defrag": "defer+madvise"}
    res = [x for x in r.findings if x.code == "thp.resolved"]
    assert {x.title.split(":")[0] for x in res} == {"THP enabled", "THP defrag"}
    assert all("MongoDB >= 8.0" in x.evidence for x in res)


def test_mongodb8_with_redis_gets_always_and_redis_a_mode_of_its_own(hosts):
    """No host-wide value suits both: MongoDB 8 needs always, Redis objects to it. Redis only
    objects to more THP, so it gets a THP mode of its own (prctl at its restart: never on a
    kernel before 6.18, where the advised-only mode does not exist) and the host always."""
    f = dataclasses.replace(facts(hosts, "thp-always"), kernel="6.12.48")  # no advised-only
    insts = [_inst("mongodb", "mongodb:27017", "8.0.4"), _inst("redis", "redis:6379", "7.0.15")]
    r = plan.build(f, insts, prof(), ENGINES)
    assert not [x for x in r.findings if x.code == "thp.conflict"]
    assert "enabled" not in _thp_changes(r)  # always, as the host has it
    [own] = [c for c in r.changes if c.kind == "process_thp"]
    assert (own.instance, own.current, own.recommended) == ("redis:6379", "inherit", "never")
    [why] = [x for x in r.findings if x.code == "thp.per_process"]
    assert why.instance == "redis:6379" and "MemoryTHP=disable" in why.rationale
    # on 6.18 the mode that keeps what it asks for
    r = plan.build(dataclasses.replace(f, kernel="6.18.2"), insts, prof(), ENGINES)
    [own] = [c for c in r.changes if c.kind == "process_thp"]
    assert own.recommended == "advised"
    # a Redis that runs in a mode of its own already (disable-thp yes) is no conflict at all
    insts[1].thp_mode = "never"
    r = plan.build(f, insts, prof(), ENGINES)
    assert not [c for c in r.changes if c.kind == "process_thp"]
    assert not [x for x in r.findings if x.code in ("thp.conflict", "thp.per_process")]
    assert any(x.code == "thp.own_mode" and x.instance == "redis:6379" for x in r.findings)


def test_a_need_no_mode_can_meet_stays_a_conflict(hosts):
    """A JVM whose thread stacks THP always would page in whole wants madvise, not never:
    before 6.18 no mode of its own gives that, so the conflict stays, kept to the profile."""
    f = dataclasses.replace(facts(hosts, "thp-always"), kernel="6.12.48")

    class Stacks(kv.RedisEngine):
        def thp_needs(self, inst, profile):
            return {"enabled": ({"madvise"}, f"{inst.id}: thread stacks")}
    engines = {**ENGINES, "redis": Stacks()}
    insts = [_inst("mongodb", "mongodb:27017", "8.0.4"), _inst("redis", "redis:6379")]
    r = plan.build(f, insts, prof(), engines)
    conflict = [x for x in r.findings if x.code == "thp.conflict"]
    assert conflict and "mongodb:27017" in conflict[0].evidence
    assert _thp_changes(r)["enabled"] == "madvise"  # the profile's value
    assert not [c for c in r.changes if c.kind == "process_thp"]


def test_a_profile_keeps_an_engine_to_less_thp_than_the_host(hosts, tmp_path):
    """A profile's [redis] thp = "madvise" under its own enabled = always: the host gets always
    and each running server of the engine a mode of its own (here an engine with no THP
    needs of its own, as PostgreSQL has none); a stopped one gets nothing."""
    (tmp_path / "p.toml").write_text('name = "p"\n[thp]\nenabled = "always"\n'
                                     '[redis]\nthp = "madvise"\n')
    p = profiles.load(str(tmp_path / "p.toml"), registry.profile_schemas())
    f = dataclasses.replace(facts(hosts, "thp-always"), kernel="6.18.2")

    class Quiet(kv.RedisEngine):
        def thp_needs(self, inst, profile):
            return {}
    engines = {"redis": Quiet()}
    r = plan.build(f, [_inst("redis", "redis:6379")], p, engines)
    assert "enabled" not in _thp_changes(r)  # always, as the profile says
    [own] = [c for c in r.changes if c.kind == "process_thp"]
    assert own.recommended == "advised" and "profile p" in own.reason
    stopped = dataclasses.replace(_inst("redis", "redis:6380"), running=False)
    assert not [c for c in plan.build(f, [stopped], p, engines).changes
                if c.kind == "process_thp"]


def test_old_mongodb_and_redis_agree_with_the_profile(hosts):
    f = facts(hosts, "thp-always")
    insts = [_inst("mongodb", "mongodb:27017", "7.0.12"), _inst("redis", "redis:6379")]
    r = plan.build(f, insts, prof(), ENGINES)
    assert not [x for x in r.findings if x.code in ("thp.conflict", "thp.resolved")]
    assert _thp_changes(r)["enabled"] == "madvise"
    assert any(x.code == "mongodb.thp" and x.severity == "warn" for x in r.findings)


def _proc(tmp_path, pid, comm, argv, extra_status=""):
    d = tmp_path / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    (d / "cmdline").write_text("\0".join(argv) + "\0")
    (d / "status").write_text(f"Name:\t{comm}\nPPid:\t1\nUid:\t0\t0\t0\t0\nVmPTE:\t 64 kB\n"
                              + extra_status)
    (d / "smaps").write_text("00400000-00600000 rw-p 00000000 00:00 0 \nSize:  2048 kB\n"
                             "KernelPageSize: 4 kB\nAnonHugePages:  2048 kB\n")
    (tmp_path / "etc").mkdir(exist_ok=True)
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")


def test_discovery_from_a_proc_tree(tmp_path, hosts):
    _proc(tmp_path, 4242, "redis-server", ["redis-server 127.0.0.1:6380"], "THP_enabled:\t0\n")
    _proc(tmp_path, 4343, "mongod", ["/usr/bin/mongod", "--port", "27018", "--config", "/x"])
    sr = SysRoot(tmp_path)
    f = facts(hosts, "thp-always")
    procs = ProcTable(sr)
    (r,) = kv.RedisEngine().discover(f, procs, None)
    assert r.id == "redis:6380" and r.backing == "thp" and r.state.thp_enabled == "0"
    (m,) = kv.MongoEngine().discover(f, procs, None)
    assert m.id == "mongodb:27018" and not m.version \
        and "--version was not read" in m.version.why  # offline: no binary to ask
    assert [x.code for x in kv.MongoEngine().findings(m, f, prof())] == ["mongodb.version.unknown"]
    fr = kv.RedisEngine().findings(r, f, prof())
    assert fr[0].code == "redis.thp.always" and fr[0].severity == "info"  # it disabled THP


def test_jvm_flag_precedence_and_reservations(tmp_path):
    f = jvm.JvmFlags()
    for a in ["-Xmx1g", "-XX:+UseLargePages", "-XX:-UseLargePages", "-XX:MaxHeapSize=2g",
              "-XX:+UseParallelGC", "-XX:ReservedCodeCacheSize=64m"]:
        f.apply(a)
    assert f.xmx == 2 << 30 and f.large_pages is False and f.gc == "Parallel"
    assert f.contradictions == ["UseLargePages"] and f.code_cache == 64 << 20
    page = 2 << 20
    g1 = jvm.JvmFlags()
    res = dict(jvm.reservations(g1, 1 << 30, 17, page, True))
    # OpenJDK 17 G1, -Xmx1g: 1 GiB heap, 240 MiB code cache, 3 x heap/512, 2 x heap/64
    assert sum(-(-b // page) for b in res.values()) == 512 + 120 + 3 + 16
    assert len([k for k in res if k.startswith("mark bitmap")]) == 2
    res21 = dict(jvm.reservations(g1, 1 << 30, 21, page, True))
    assert len([k for k in res21 if k.startswith("mark bitmap")]) == 1
    assert jflags.parse_jsize("512m") == 512 << 20 and jflags.parse_jsize("x") is None
    (tmp_path / "args").write_text("# comment\n-Xmx3g '-Dx=a b'\n")
    notes: list[str] = []
    out = jflags.expand_argfiles(SysRoot("/"), ("-server", f"@{tmp_path}/args", "@/nonexistent"),
                              None, notes)
    assert out == ["-server", "-Xmx3g", "-Dx=a b"] and "unreadable" in notes[0]


def test_profiles_for_mixed_hosts_load():
    for name in ("oltp", "mixed", "jvm", "kvm-host"):
        p = prof(name)
        assert p.name == name and p.description
    assert prof("jvm").engine("jvm")["mode"] == "static"
    assert prof("mixed").engine("jvm")["mode"] == "thp"
    assert dataclasses.asdict(prof("kvm-host"))["gigantic"] == "prefer"


def test_qemu_guest_sized_on_1g_pages_with_kvm_host(tmp_path, hosts):
    from hpadvise.plugins import qemu
    argv = ["/usr/bin/qemu-system-x86_64", "-name", "guest=db1,debug-threads=on", "-m",
            "size=16777216k,slots=16,maxmem=33554432k", "-object",
            "memory-backend-file,id=ram-node0,mem-path=/dev/hugepages/libvirt/qemu,"
            "share=yes,size=17179869184"]
    _proc(tmp_path, 777, "qemu-system-x86", argv)
    f = facts(hosts, "pool-1g")
    (g,) = qemu.QemuEngine().discover(f, ProcTable(SysRoot(tmp_path)), None)
    assert g.id == "qemu:db1" and g.settings["hugepages_backing"] is True
    assert g.demand.pages[1048576] == 16 and g.demand.pages[2048] == 8192
    if f.supports_1g:
        r = plan.build(f, [g], prof("kvm-host"), {"qemu": qemu.QemuEngine()})
        assert [p.size_kb for p in r.pools] == [1048576]
        assert r.pools[0].demand_pages == 16
    assert qemu.guest_memory(("qemu-kvm", "-m", "4096"))[0] == [4096 << 20]
    assert qemu.guest_memory(("qemu-kvm", "-m", "4G"))[0] == [4 << 30]


def test_jvm_named_by_main_class_and_survives_a_vanishing_process(tmp_path, hosts):
    argv = ["/usr/bin/java", "-Xms4g", "-Xmx4g", "-cp", "/opt/cassandra/lib/*",
            "org.apache.cassandra.service.CassandraDaemon", "-f"]
    _proc(tmp_path, 555, "java", argv)
    # a JVM that exited between listing and reading: comm and cmdline only
    gone = tmp_path / "proc" / "556"
    gone.mkdir(parents=True)
    (gone / "comm").write_text("java\n")
    (gone / "cmdline").write_text("java\0-Xmx1g\0Main\0")
    f = facts(hosts, "no-pools")
    found = {i.pid: i for i in jvm.JvmEngine().discover(f, ProcTable(SysRoot(tmp_path)), None)}
    c = found[555]
    assert c.label.startswith("Cassandra") and c.settings["heap_max"] == "4 GiB"
    assert c.state.flags.main == "org.apache.cassandra.service.CassandraDaemon"
    g = found[556]
    assert g.demand is not None and g.backing is None  # no smaps: nothing claimed
    codes = {x.code for x in jvm.JvmEngine().findings(g, f, prof())}
    assert "jvm.flags.partial" in codes  # its environment could not be read


def test_a_plan_that_lowers_always_names_who_loses_thp(hosts):
    """Under always, a server holding THP in memory it did not madvise loses it for its new
    memory when the plan goes to madvise: named, with how much; not a server in a THP mode of
    its own, nor one holding none."""
    f = facts(hosts, "thp-always")
    held = dataclasses.replace(_inst("redis", "redis:6379"), thp_unadvised_kb=8192)
    own = dataclasses.replace(_inst("redis", "redis:6380"), thp_unadvised_kb=8192,
                              thp_mode="never")
    none = dataclasses.replace(_inst("redis", "redis:6381"), thp_unadvised_kb=0)
    r = plan.build(f, [held, own, none], prof(), ENGINES)
    assert _thp_changes(r)["enabled"] == "madvise"
    [t] = [x for x in r.findings if x.code == "thp.taken"]
    assert t.instance == "redis:6379" and "8 MiB of THP" in t.rationale
    # a plan that keeps always takes nothing
    keep = dataclasses.replace(prof(), thp={**prof().thp, "enabled": "keep"})
    r = plan.build(facts(hosts, "thp-always"), [_inst("mongodb", "mongodb:1", "8.0.4"), held],
                   keep, {"mongodb": kv.MongoEngine()})
    assert not [x for x in r.findings if x.code == "thp.taken"]
