"""MongoDB >= 8.0 wants THP always only where it runs its upgraded TCMalloc: x86-64 and arm64
(the MongoDB Manual's TCMalloc page, "Platform Support"); on ppc64le and s390x it keeps the
legacy TCMalloc and wants THP off. The architecture is read from the process's own binary
(ELF e_machine), else the kernel's /proc/sys/kernel/arch (procs.machine_of)."""

import pytest

from hpadvise.facts import host
from hpadvise.planning import plan
from hpadvise.api import profiles
from hpadvise.api.engines import Instance, registry
from hpadvise.plugins import kv
from hpadvise.facts.procs import ProcTable, machine_of
from hpadvise.facts.sysroot import SysRoot

ENGINES = {"redis": kv.RedisEngine(), "mongodb": kv.MongoEngine()}


def _elf(em: int, little: bool = True) -> bytes:
    """The first 20 bytes of a 64-bit ELF header: magic, class, data, ..., e_machine."""
    order = "little" if little else "big"
    return (b"\x7fELF\x02" + (b"\x01" if little else b"\x02") + b"\x01" + bytes(9)
            + (2).to_bytes(2, order) + em.to_bytes(2, order) + bytes(44))


@pytest.mark.parametrize("em,little,arch", [(62, True, "x86_64"), (183, True, "aarch64"),
                                            (21, True, "ppc64le"), (21, False, "ppc64"),
                                            (22, False, "s390x")])
def test_machine_from_the_binarys_own_header(tmp_path, em, little, arch):
    d = tmp_path / "proc/77"
    d.mkdir(parents=True)
    (d / "exe").write_bytes(_elf(em, little))
    assert machine_of(SysRoot(tmp_path), 77) == arch


def test_machine_from_the_kernel_then_unknown(tmp_path):
    (tmp_path / "proc/77").mkdir(parents=True)
    (tmp_path / "proc/77/exe").symlink_to("/usr/bin/mongod")  # a captured link: not followed
    sr = SysRoot(tmp_path)
    assert machine_of(sr, 77) is None
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/arch").write_text("s390x\n")
    assert machine_of(sr, 77) == "s390x"


def _mongo(version, arch):
    i = Instance("mongodb", "mongodb:27017", "mongodb:27017", True, pid=1, version=version)
    i.state = kv.Observed(None, arch=arch)
    return i


def _plan(hosts, state, insts):
    prof = profiles.load("oltp", registry.profile_schemas())
    r = plan.build(host.collect(SysRoot(hosts / state)), insts, prof, ENGINES)
    return r, {c.knob: c.recommended for c in r.changes if c.kind == "thp"}


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_mongodb8_gets_always_on_x86_64_and_arm64(hosts, arch):
    r, thp = _plan(hosts, "no-pools", [_mongo("8.0.4", arch)])
    assert thp == {"enabled": "always", "defrag": "defer+madvise"}
    (f,) = [x for x in r.findings if x.code == "mongodb.thp"]
    assert f.title == "THP is not as MongoDB >= 8.0 wants it"
    assert "not read" not in f.evidence


@pytest.mark.parametrize("arch", ["ppc64le", "s390x"])
def test_mongodb8_elsewhere_keeps_the_legacy_tcmalloc_and_thp_off(hosts, arch):
    # THP always here: the plan takes it back to the profile's madvise, never keeps always
    r, thp = _plan(hosts, "thp-always", [_mongo("8.0.4", arch)])
    assert thp["enabled"] == "madvise" and thp.get("defrag") != "defer+madvise"
    (f,) = [x for x in r.findings if x.code == "mongodb.thp"]
    assert f.severity == "warn"
    assert f.title == f"THP enabled=always does not suit MongoDB >= 8.0 on {arch}"
    assert "legacy TCMalloc" in f.rationale and "Platform Support" in f.source
    # already madvise: nothing to plan for it, and it is told so
    r, thp = _plan(hosts, "no-pools", [_mongo("8.0.4", arch)])
    assert "enabled" not in thp
    (f,) = [x for x in r.findings if x.code == "mongodb.thp"]
    assert f.severity == "ok"


def test_an_unread_architecture_is_said(hosts):
    r, thp = _plan(hosts, "no-pools", [_mongo("8.0.4", None)])
    assert thp["enabled"] == "always"  # x86-64 and arm64 are where MongoDB 8 runs
    (f,) = [x for x in r.findings if x.code == "mongodb.thp"]
    assert "its architecture was not read: this holds on x86-64 and arm64 only" in f.evidence


def test_discovery_reads_the_architecture(tmp_path, hosts):
    d = tmp_path / "proc/4343"
    d.mkdir(parents=True)
    (d / "comm").write_text("mongod\n")
    (d / "cmdline").write_text("/usr/bin/mongod\0--port\00027018\0")
    (d / "status").write_text("Name:\tmongod\nPPid:\t1\nUid:\t0\t0\t0\t0\n")
    (d / "exe").write_bytes(_elf(21))
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    f = host.collect(SysRoot(hosts / "no-pools"))
    (m,) = kv.MongoEngine().discover(f, ProcTable(SysRoot(tmp_path)), None)
    assert m.state.arch == "ppc64le"
