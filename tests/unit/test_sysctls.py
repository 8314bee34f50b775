"""The kernel settings declared as data (advisor/facts/sysctls.py): each declaration's parts,
its rule on the cases that decide it, its place in the boot order and in the drop-in, its
action's journal round trip, and the two-node guest's captured tree with the setting on."""

import shutil
from pathlib import Path

import pytest

from hpadvise.api import profiles
from hpadvise.api.engines import catalog, registry
from hpadvise.changes.actions import KINDS, ActionError, Sysctl
from hpadvise.facts import boot, sysctls
from hpadvise.facts.sysctls import PLANNED, Case, ShmCred, ShmUser, shm_cred
from hpadvise.facts.sysroot import SysRoot
from hpadvise.kit.knob_id import KnobId
from hpadvise.nextboot import boot_persist
from hpadvise.planning import pipeline

GUESTS = Path(__file__).resolve().parents[1] / "fixtures" / "guests"
STATUS = {"Gid": "65534\t65534\t65534\t65534", "Groups": "27 65534", "CapEff": "0000000000000000"}


def test_every_planned_setting_is_declared_whole():
    shipped = {n: profiles.load(n, registry.profile_schemas()) for n in profiles.shipped()}
    for s in PLANNED:
        assert s.default is not None and s.default_source and s.code and s.rule, s.name
        assert s.meaning and s.metric == "hpadvise_sysctl_" + s.name.replace(".", "_")
        assert catalog()[s.code.code][0] == "core"
        assert s.profile_default in ("keep", *s.profile)
        assert s.path == "/proc/sys/" + s.name.replace(".", "/")
        assert KnobId.sysctl(s.name).key == "sysctl." + s.name
        for name, p in shipped.items():
            lines = (profiles._shipped_dir() / f"{name}.toml").read_text().splitlines()
            at = [n for n, line in enumerate(lines) if line.startswith(f"{s.key} = ")]
            # oltp's file documents every key, a comment above each saying why (a copy of it
            # keeps its values); the others state a setting only where they want another
            # value than the declared default, so a new setting needs no line in them
            if name == "oltp" or p.wants(s.name) != s.profile_default:
                assert at and lines[at[0] - 1].startswith("#"), (name, s.key)
            else:
                assert not at, (name, s.key)
            assert p.wants(s.name) != "keep"


def test_a_profile_value_out_of_the_declared_ones_is_refused(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('name = "x"\n[sysctl]\nzone_reclaim_mode = 9\n')
    with pytest.raises(Exception, match="sysctl.zone_reclaim_mode = 9 is not one of"):
        profiles.load(str(f))
    f.write_text('name = "x"\n[sysctl]\nzone_reclaim_mode = "keep"\nhugetlb_shm_group = "keep"\n')
    assert profiles.load(str(f)).wants("vm.zone_reclaim_mode") == "keep"


def test_credentials_from_status():
    c = shm_cred(STATUS, own_userns=False)
    assert c == ShmCred(65534, frozenset({27, 65534}), False)
    cap = {**STATUS, "CapEff": f"{1 << 14:016x}"}  # CAP_IPC_LOCK
    assert shm_cred(cap, own_userns=False).ipc_lock
    assert not shm_cred(cap, own_userns=True).ipc_lock  # not the host's capability
    assert shm_cred({"Gid": "0"}, own_userns=False) is None  # no fs gid: unknown


def _rule(name):
    return sysctls.BY_NAME[name].rule


def test_zone_reclaim_mode_rule():
    rule = _rule("vm.zone_reclaim_mode")
    assert rule(Case(1, 0, (0, 1), ())).value == 0
    assert rule(Case(1, 0, (0,), ())) is None  # one node: nothing to spare elsewhere
    assert rule(Case(0, 0, (0, 1), ())).value == 0  # managed (persisted), nothing to change
    assert rule(Case(1, "keep", (0, 1), ())) is None


def test_hugetlb_shm_group_rule():
    rule = _rule("vm.hugetlb_shm_group")
    nobody = ShmUser("jvm:1", ShmCred(65534, frozenset({65534, 27}), False))
    assert rule(Case(0, "auto", (0,), (nobody,))).value == 65534
    assert rule(Case(27, "auto", (0,), (nobody,))).value == 27  # a group of its: kept
    locked = ShmUser("jvm:2", ShmCred(100, frozenset({100}), True))
    assert rule(Case(0, "auto", (0,), (locked,))) is None  # CAP_IPC_LOCK needs none
    assert rule(Case(0, "keep", (0,), (nobody,))) is None
    other = ShmUser("mysql:3306", ShmCred(101, frozenset({101, 27}), False))
    assert rule(Case(0, "auto", (0,), (nobody, other))).value == 27  # the group they share
    apart = ShmUser("mysql:3307", ShmCred(102, frozenset({102}), False))
    w = rule(Case(0, "auto", (0,), (nobody, apart)))
    assert w.value is None and "share no group" in w.why
    # a group someone chose admits one server and not the other: never moved away from it
    w = rule(Case(101, "auto", (0,), (other, nobody)))
    assert w.value is None and "jvm:1" in w.title and "mysql:3306" not in w.title


def _tree(tmp_path, src: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "root"
    shutil.copytree(src, root, symlinks=True)
    for rel, text in files.items():
        p = root / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_two_node_guest_with_zone_reclaim_on(tmp_path):
    """The two-node guest's captured tree with vm.zone_reclaim_mode = 1 and a sysctl file
    that sets it at boot: the plan sets 0, says so, and persists it after that file."""
    root = _tree(tmp_path, GUESTS / "amd64-2node-membind", {
        "/proc/sys/vm/zone_reclaim_mode": "1\n",
        "/etc/sysctl.d/80-numa.conf": "vm.zone_reclaim_mode = 1\n"})
    r = pipeline.inspect(SysRoot(str(root)), engine_names=["postgres"])
    (c,) = [c for c in r.changes if c.kind == "sysctl"]
    assert (c.knob, c.current, c.recommended) == ("vm.zone_reclaim_mode", 1, 0)
    assert "kernel.zone_reclaim_mode" in {f.code for f in r.findings}
    key = KnobId.sysctl("vm.zone_reclaim_mode")
    assert r.host.boot.at_boot(key).source == "/etc/sysctl.d/80-numa.conf:1"
    per = boot_persist.persistence(r.host.boot, {key: "0"}, 2048)
    # after 80-numa.conf, which sorts after 60-hpadvise.conf
    assert per.sysctl == {key: "0"} and per.sysctl_name == boot_persist.SYSCTL_LATE
    assert boot_persist.after_apply(r.host.boot, per).at_boot(key).value == "0"


def test_boot_reader_sees_the_declared_settings_everywhere(tmp_path):
    root = _tree(tmp_path, GUESTS / "amd64-2node-membind", {
        "/etc/sysctl.d/99-z.conf": "vm/hugetlb_shm_group = 1001\nvm.swappiness = 1\n",
        "/etc/rc.local": "#!/bin/sh\necho 1 > /proc/sys/vm/zone_reclaim_mode\n"
                         "sysctl -w vm.hugetlb_shm_group=1002\n"})
    (root / "etc/rc.local").chmod(0o755)
    b = boot.read(SysRoot(str(root)), 2048)
    assert b.at_boot(KnobId.sysctl("vm.zone_reclaim_mode")).source == "/etc/rc.local:2"
    assert b.at_boot(KnobId.sysctl("vm.hugetlb_shm_group")).value == "1002"
    shm = KnobId.sysctl("vm.hugetlb_shm_group")
    assert [s.source for s in b.setters if s.knob == shm][:2] == [
        "kernel default (fs/hugetlbfs/inode.c sysctl_hugetlb_shm_group)",
        "/etc/sysctl.d/99-z.conf:1"]
    assert not [s for s in b.setters if "swappiness" in s.knob.key]  # read, never planned


def test_sysctl_action(tmp_path):
    f = tmp_path / "zone_reclaim_mode"
    f.write_text("1\n")
    a = Sysctl(str(f))
    assert KINDS[a.kind].from_spec(a.spec()).path == a.path
    assert a.get() == 1
    a.set(0)
    assert a.verify(0) == (True, 0) and a.restored(0) is None
    assert a.invalid("1") and a.invalid(True) and a.invalid(-1) and a.invalid(3) is None
    assert a.shell(0) == [f"echo 0 > {f}"]
    f.write_text("x\n")
    with pytest.raises(ActionError, match="not a number"):
        a.get()


def test_every_apply_persists_what_the_plan_manages(tmp_path):
    """vm.zone_reclaim_mode already 0 on two nodes: no change, yet the plan manages it, so an
    apply (of the pool here) writes it into the drop-in beside the pool, and a second apply
    does not drop the line an earlier one wrote."""
    from hpadvise.act.apply import prepare
    from hpadvise.changes.actions import File
    from hpadvise.nextboot.boot_plan import plan_knobs, view
    root = _tree(tmp_path, GUESTS / "amd64-2node-membind", {"/proc/sys/vm/zone_reclaim_mode": "0\n"})
    r = pipeline.inspect(SysRoot(str(root)), engine_names=["postgres"])
    assert r.sysctls == {"vm.zone_reclaim_mode": 0}  # no SysV user: the group is not managed
    assert not [c for c in r.changes if c.kind == "sysctl"]
    assert "kernel.zone_reclaim_mode" not in {f.code for f in r.findings}
    key = KnobId.sysctl("vm.zone_reclaim_mode")
    assert plan_knobs(r)[key] == "0"
    [row] = [v for v in view(r) if v["knob"] == key.key]
    assert (row["name"], row["now"], row["at_boot"], row["plan"]) == (
        "vm.zone_reclaim_mode", "0", "0", "0")
    out = tmp_path / "persist"
    (out / "etc/sysctl.d").mkdir(parents=True)
    p = prepare(r, r.engines, restart=False, persist=True, read_only=True, persist_root=str(out))
    [step] = [s for s in p.steps if str(getattr(s.action, "path", "")).endswith(
        "/etc/sysctl.d/60-hpadvise.conf")]
    lines = File.decode(step.new).splitlines()
    assert "vm.zone_reclaim_mode = 0" in lines, lines


def test_under_tuned_that_does_not_reapply_sysctl_files_the_child_profile_says_it(tmp_path):
    """TuneD's profile sets vm.zone_reclaim_mode = 1 and, with reapply_sysctl = 0, applies it
    after every sysctl file: the drop-in cannot win, so the plan's 0 goes into hpadvise's
    child profile's [sysctl] section, and the drop-in leaves it out."""
    from hpadvise.act.apply import prepare
    from hpadvise.changes.actions import File
    root = _tree(tmp_path, GUESTS / "amd64-2node-membind", {
        "/proc/sys/vm/zone_reclaim_mode": "1\n", "/usr/sbin/tuned": "",
        "/etc/tuned/active_profile": "numa\n", "/etc/tuned/tuned-main.conf": "reapply_sysctl = 0\n",
        "/usr/lib/tuned/numa/tuned.conf": "[sysctl]\nvm.zone_reclaim_mode=1\n"})
    r = pipeline.inspect(SysRoot(str(root)), engine_names=["postgres"])
    key = KnobId.sysctl("vm.zone_reclaim_mode")
    assert r.host.boot.at_boot(key).source.startswith("TuneD [sysctl]")
    out = tmp_path / "persist"
    (out / "etc/sysctl.d").mkdir(parents=True)
    p = prepare(r, r.engines, restart=False, persist=True, read_only=True, persist_root=str(out))
    files = {str(s.action.path).split("/persist", 1)[-1]: File.decode(s.new) for s in p.steps
             if isinstance(s.action, File) and s.new is not None}
    assert "[sysctl]" in files["/etc/tuned/hpadvise/tuned.conf"]
    assert "vm.zone_reclaim_mode=0" in files["/etc/tuned/hpadvise/tuned.conf"].splitlines()
    assert "zone_reclaim_mode" not in files.get("/etc/sysctl.d/60-hpadvise.conf", "")


def test_a_managed_setting_the_plan_leaves_as_it_is_never_blocks_apply(tmp_path):
    """Two nodes, vm.zone_reclaim_mode 0 now and rc.local sets 1 at boot: nothing to change,
    so apply is not refused; boot.differs says the next boot undoes it."""
    root = _tree(tmp_path, GUESTS / "amd64-2node-membind", {
        "/proc/sys/vm/zone_reclaim_mode": "0\n",
        "/etc/rc.local": "#!/bin/sh\necho 1 > /proc/sys/vm/zone_reclaim_mode\n"})
    (root / "etc/rc.local").chmod(0o755)
    r = pipeline.inspect(SysRoot(str(root)), engine_names=["postgres"])
    assert not [b for b in r.blocked if "zone_reclaim_mode" in b]
    [f] = [f for f in r.findings if f.code == "boot.differs" and "zone_reclaim" in f.title]
    assert f.title == "vm.zone_reclaim_mode is 0 now and 1 after a reboot"
    assert "/etc/rc.local:2" in f.evidence and "remove that setting" in f.rationale


def test_a_later_apply_keeps_what_an_earlier_one_persisted(tmp_path):
    """hpadvise's drop-in holds vm.hugetlb_shm_group = 1001 from an earlier apply; a plan
    that does not decide it (no SysV user among its instances) rewrites the drop-in for its
    pool and keeps that line; and the group an earlier apply chose may be moved."""
    from hpadvise.act.apply import prepare
    from hpadvise.changes.actions import File
    root = _tree(tmp_path, GUESTS / "amd64-2node-membind", {
        "/proc/sys/vm/hugetlb_shm_group": "1001\n",
        "/etc/sysctl.d/60-hpadvise.conf": "vm.nr_hugepages = 1\nvm.hugetlb_shm_group = 1001\n"})
    r = pipeline.inspect(SysRoot(str(root)), engine_names=["postgres"])
    assert "vm.hugetlb_shm_group" not in r.sysctls
    out = tmp_path / "persist"
    (out / "etc/sysctl.d").mkdir(parents=True)
    p = prepare(r, r.engines, restart=False, persist=True, read_only=True, persist_root=str(out))
    [step] = [s for s in p.steps if str(getattr(s.action, "path", "")).endswith(
        "/etc/sysctl.d/60-hpadvise.conf")]
    assert "vm.hugetlb_shm_group = 1001" in File.decode(step.new).splitlines()
    rule = sysctls.BY_NAME["vm.hugetlb_shm_group"].rule
    nobody = ShmUser("jvm:1", ShmCred(65534, frozenset({65534}), False))
    assert rule(Case(1001, "auto", (0,), (nobody,), own=True)).value == 65534
    assert rule(Case(1001, "auto", (0,), (nobody,), own=False)).value is None
