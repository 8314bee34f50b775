"""TuneD's profiles read as TuneD merges and applies them, on a captured host with Debian's
TuneD 2.20 files (tests/fixtures/tuned): units that do not match this host, the merged order
rather than the file order, priorities, disabled units, the version's own options, the command
line's THP mode; and the child profile apply writes, overriding each unit that sets a knob."""

import shutil
from pathlib import Path

import pytest

from hpadvise.facts import boot, tuned
from hpadvise.facts.sysroot import SysRoot
from hpadvise.planning import pipeline
from hpadvise.kit.knob_id import KnobId

TUNED = Path(__file__).resolve().parents[1] / "fixtures" / "tuned"
GUESTS = Path(__file__).resolve().parents[1] / "fixtures" / "guests"
THP = "/sys/kernel/mm/transparent_hugepage"
VERSION = (TUNED / "version.py").read_text()
X86 = {"/proc/sys/kernel/ostype": "Linux\n", "/proc/sys/kernel/hostname": "db1\n",
       "/proc/sys/kernel/version": "#1 SMP PREEMPT_DYNAMIC\n", "/proc/sys/kernel/arch": "x86_64\n"}


def _tree(src: Path, dest: Path, files: dict[str, str]) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    files = {"/usr/sbin/tuned": "", "/usr/lib/python3/dist-packages/tuned/version.py": VERSION,
             **files}
    for rel, text in files.items():
        p = dest / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return dest


def _profiles(**confs: str) -> dict[str, str]:
    return {f"/etc/tuned/{name.replace('_', '-')}/tuned.conf": text
            for name, text in confs.items()}


def _boot(root: Path) -> boot.Boot:
    return boot.read(SysRoot(root), 2048)


def _by(b: boot.Boot, knob: KnobId) -> str:
    """Who sets the knob at boot ("" where nothing does, the tree has no kernel config)."""
    s = b.at_boot(knob)
    return s.source if s else ""


def test_a_unit_for_other_cpus_is_not_applied(hosts, tmp_path):
    """throughput-performance as shipped: its [vm.thunderx] (transparent_hugepages=never) is
    for ThunderX arm64 CPUs only, by uname_regex and cpuinfo_regex."""
    shipped = {"/usr/lib/tuned/throughput-performance/tuned.conf":
               (TUNED / "throughput-performance.conf").read_text(),
               "/etc/tuned/active_profile": "throughput-performance\n"}
    b = _boot(_tree(hosts / "no-pools", tmp_path / "x86", {**shipped, **X86}))
    assert b.tuned_version == (2, 20)
    assert not _by(b, KnobId.thp("enabled")).startswith("TuneD"), _by(b, KnobId.thp("enabled"))
    assert any("TuneD does not apply [vm.thunderx]: its uname_regex does not match" in n
               for n in b.notes), b.notes
    # the same profile on a ThunderX2 (CPU part 0x0af): never, from that unit
    arm = GUESTS / "arm64-4k-pg32m"
    cpuinfo = (arm / "proc/cpuinfo").read_text().replace("CPU part\t: 0x051",
                                                        "CPU part\t: 0x0af")
    b = _boot(_tree(arm, tmp_path / "arm", {**shipped, "/proc/cpuinfo": cpuinfo,
                                            **X86, "/proc/sys/kernel/arch": "aarch64\n"}))
    s = b.at_boot(KnobId.thp("enabled"))
    assert s.value == "never" and s.source.startswith("TuneD [vm]"), s
    assert s.source.endswith("throughput-performance/tuned.conf:22")
    assert b.tuned_units[KnobId.thp("enabled")] == (("vm.thunderx", "vm", "transparent_hugepages"),)


def test_units_apply_in_the_merged_order_and_only_options_the_version_takes(hosts, tmp_path):
    """A child's [sysfs] merges into the parent's [sysfs], which applies before the parent's
    [vm]: the [vm] value is the one left at boot, though the child's line comes later in the
    files. TuneD before 2.11 does not know [vm] transparent_hugepage.defrag."""
    files = {**X86, "/etc/tuned/active_profile": "db-local\n", **_profiles(
        db=f"[sysfs]\n{THP}/khugepaged/defrag=1\n[vm]\ntransparent_hugepage.defrag=always\n",
        db_local=f"[main]\ninclude=db\n[sysfs]\n{THP}/defrag=never\n")}
    b = _boot(_tree(hosts / "no-pools", tmp_path / "a", files))
    s = b.at_boot(KnobId.thp("defrag"))
    assert s.value == "always" and s.source == "TuneD [vm] /etc/tuned/db/tuned.conf:4", s
    assert b.tuned_units[KnobId.thp("defrag")] == (("sysfs", "sysfs", f"{THP}/defrag"),
                                           ("vm", "vm", "transparent_hugepage.defrag"))
    old = VERSION.replace("MINOR = 20", "MINOR = 10")
    b = _boot(_tree(hosts / "no-pools", tmp_path / "b", {
        **files, "/usr/lib/python3/dist-packages/tuned/version.py": old}))
    assert b.tuned_version == (2, 10)
    assert b.at_boot(KnobId.thp("defrag")).value == "never"


def test_priority_disabled_units_and_the_command_line(hosts, tmp_path):
    """A unit of a lower priority applies first, whatever its place; a disabled unit not at
    all; [vm] transparent_hugepages yields to transparent_hugepage= on the command line."""
    files = {**X86, "/etc/tuned/active_profile": "db\n", **_profiles(db=(
        "[vm]\ntransparent_hugepages=never\n"
        f"[early]\ntype=sysfs\npriority=-10\n{THP}/enabled=always\n"
        f"[off]\ntype=sysfs\nenabled=false\n{THP}/shmem_enabled=always\n"))}
    b = _boot(_tree(hosts / "no-pools", tmp_path / "a", files))
    s = b.at_boot(KnobId.thp("enabled"))
    assert s.value == "never" and s.source.startswith("TuneD [vm]"), s
    assert b.tuned_units[KnobId.thp("enabled")] == (("early", "sysfs", f"{THP}/enabled"),
                                            ("vm", "vm", "transparent_hugepages"))
    assert not _by(b, KnobId.thp("shmem_enabled")).startswith("TuneD")
    assert "TuneD's [off] is disabled (enabled=false)" in b.notes
    grub = {"/etc/default/grub": 'GRUB_CMDLINE_LINUX="quiet transparent_hugepage=madvise"\n'}
    b = _boot(_tree(hosts / "no-pools", tmp_path / "b", {**files, **grub}))
    s = b.at_boot(KnobId.thp("enabled"))  # the [sysfs] unit still writes; [vm] leaves it alone
    assert s.value == "always" and s.source.startswith("TuneD [sysfs]"), s


def test_the_version_is_read_where_each_distribution_installs_it(tmp_path):
    for where in ("/usr/lib/python3/dist-packages", "/usr/lib/python3.9/site-packages",
                  "/usr/lib/python2.7/site-packages"):
        root = tmp_path / where.split("/")[3]
        p = root / where.lstrip("/") / "tuned" / "version.py"
        p.parent.mkdir(parents=True)
        p.write_text(VERSION)
        assert tuned.version(SysRoot(root)) == (2, 20), where
    assert tuned.version(SysRoot(tmp_path / "none")) is None
    # a leftover of an older TuneD beside the installed one: the newest is TuneD's
    old = tmp_path / "python3" / "usr/lib/python2.7/site-packages/tuned/version.py"
    old.parent.mkdir(parents=True)
    old.write_text(VERSION.replace("= 20", "= 10"))
    assert tuned.version(SysRoot(tmp_path / "python3")) == (2, 20)


def _applied(tmp_path: Path, files: dict[str, str], name: str) -> tuple[str, boot.Boot]:
    """apply's TuneD child profile for a captured two-node guest with `files` (written by
    prepare, read only), the plan's boot values, and the boot read again with the child in
    place and active: what TuneD would apply."""
    from hpadvise.act.apply import prepare
    from hpadvise.changes.actions import File
    root = _tree(GUESTS / "amd64-2node-membind", tmp_path / name, files)
    r = pipeline.inspect(SysRoot(str(root)), engine_names=["postgres"])
    out = tmp_path / f"{name}-persist"
    (out / "etc/sysctl.d").mkdir(parents=True)
    p = prepare(r, r.engines, restart=False, persist=True, read_only=True,
                persist_root=str(out))
    [(path, text)] = [(str(s.action.path)[len(str(out)):], File.decode(s.new)) for s in p.steps
                      if isinstance(s.action, File) and str(s.action.path).endswith(
                          "/hpadvise/tuned.conf")]
    (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root / path.lstrip("/")).write_text(text)
    (root / "etc/tuned/active_profile").write_text("hpadvise\n")
    return path + "\n" + text, _boot(root)


def test_the_child_profile_overrides_every_unit_that_sets_a_knob(tmp_path):
    """apply's child profile: the plan's defrag goes into both units of the parent that set it
    (the custom-named one says its type again), the plan's THP mode into the [vm] unit that
    sets it, and a knob no unit sets into a unit of hpadvise's own ([vm.hpadvise] for defrag
    on 2.20, [sysfs.hpadvise] on 2.10). Read back with the child active, the boot gives the
    plan's values from the child."""
    files = {**X86, "/sys/kernel/mm/transparent_hugepage/defrag":
             "always defer defer+madvise madvise [never]\n",
             "/etc/tuned/active_profile": "db\n", **_profiles(db=(
                 f"[thp]\ntype=sysfs\n{THP}/defrag=never\n"
                 "[vm]\ntransparent_hugepage.defrag=never\ntransparent_hugepages=never\n"))}
    text, b = _applied(tmp_path, files, "both")
    sections = [s.strip() for s in text.split("\n[")[1:]]
    assert f"thp]\ntype=sysfs\n{THP}/defrag=madvise" in sections, text
    vm = next(s for s in sections if s.startswith("vm]"))
    assert "transparent_hugepage.defrag=madvise" in vm and "transparent_hugepages=" in vm
    assert (b.at_boot(KnobId.thp("defrag")).value, b.tuned_profile) == ("madvise", "hpadvise")
    files["/etc/tuned/db/tuned.conf"] = "[vm]\ntransparent_hugepages=never\n"
    text, b = _applied(tmp_path, files, "none")
    assert "\n[vm.hpadvise]\ntype=vm\ntransparent_hugepage.defrag=madvise\n" in text, text
    assert b.at_boot(KnobId.thp("defrag")).value == "madvise"
    files["/usr/lib/python3/dist-packages/tuned/version.py"] = VERSION.replace("= 20", "= 10")
    text, b = _applied(tmp_path, files, "old")
    assert f"\n[sysfs.hpadvise]\ntype=sysfs\n{THP}/defrag=madvise\n" in text, text
    assert "transparent_hugepage.defrag" not in text
    assert b.at_boot(KnobId.thp("defrag")).value == "madvise"


def test_the_child_never_merges_into_a_unit_that_does_not_set_the_knob(tmp_path):
    """A parent's [vm] that is disabled, for other machines, or of another type: a child
    section named [vm] would merge into it (re-enabling it, keeping its uname_regex, changing
    its type). The plan's THP modes go into hpadvise's own units and come back at boot."""
    for name, unit in (("disabled", "[vm]\nenabled=false\ntransparent_hugepages=always\n"),
                       ("arm", "[vm]\nuname_regex=aarch64\ntransparent_hugepages=never\n"),
                       ("typed", "[vm]\ntype=sysctl\nvm.swappiness=10\n")):
        files = {**X86, "/etc/tuned/active_profile": "db\n", **_profiles(db=unit)}
        text, b = _applied(tmp_path, files, name)
        assert "\n[vm]\n" not in text, (name, text)
        for knob in (KnobId.thp("enabled"), KnobId.thp("defrag")):
            s = b.at_boot(knob)
            assert s and s.source.startswith("TuneD") and "/hpadvise/tuned.conf" in s.source, \
                (name, knob, s)


def test_tuned_files_as_tunes_configparser_and_variables_read_them(hosts, tmp_path):
    """Inline comments, quotes kept (a quoted THP mode is refused), variables defined in
    order or from an include file, an undefined one not counted."""
    files = {**X86, "/etc/tuned/active_profile": "db\n",
             "/etc/tuned/vars.conf": "hp = 64\n", **_profiles(db=(
                 "[variables]\ninclude=/etc/tuned/vars.conf\ntwice=${hp}${hp}\n"
                 "[vm]\ntransparent_hugepages=never # no THP\n"
                 '[sysfs]\n/sys/kernel/mm/transparent_hugepage/defrag="never"\n'
                 "[sysctl]\nvm.nr_hugepages=${hp}\nvm.zone_reclaim_mode=${unset}\n"))}
    b = _boot(_tree(hosts / "no-pools", tmp_path / "a", files))
    assert b.at_boot(KnobId.thp("enabled")).value == "never"
    assert not _by(b, KnobId.thp("defrag")).startswith("TuneD")
    assert any("defrag=\"never\"" in n and "sets nothing" in n for n in b.notes), b.notes
    assert b.at_boot(KnobId.pool(2048)).value == "64"
    assert any("${unset}" in n and "not counted" in n for n in b.notes), b.notes
    assert not _by(b, KnobId.sysctl("vm.zone_reclaim_mode")).startswith("TuneD")


def test_profiles_are_found_as_tuneds_locator_finds_them(hosts, tmp_path):
    """From 2.24 TuneD's profiles have a directory of their own (/usr/lib/tuned/profiles,
    /etc/tuned/profiles): the child goes there too. include= splits at , and ;, a `-` name is
    optional, /etc's profile X including X gets /usr/lib's, a missing one loads nothing."""
    files = {**X86, "/etc/tuned/active_profile": "local\n",
             "/usr/lib/tuned/profiles/local/tuned.conf": "[vm]\ntransparent_hugepages=always\n",
             "/usr/lib/tuned/profiles/base/tuned.conf": "[sysctl]\nvm.nr_hugepages=8\n",
             "/etc/tuned/profiles/local/tuned.conf":
                 "[main]\ninclude=base; -gone ,local\n[vm]\ntransparent_hugepages=never\n"}
    b = _boot(_tree(hosts / "no-pools", tmp_path / "a", files))
    assert [f.split("/tuned/")[1] for f in b.tuned_files] == [
        "profiles/base/tuned.conf", "profiles/local/tuned.conf", "profiles/local/tuned.conf"]
    assert b.tuned_dir == "/etc/tuned/profiles"
    assert b.at_boot(KnobId.thp("enabled")).value == "never"
    assert b.at_boot(KnobId.pool(2048)).value == "8"
    files["/etc/tuned/profiles/local/tuned.conf"] = "[main]\ninclude=gone\n[vm]\nx=1\n"
    b = _boot(_tree(hosts / "no-pools", tmp_path / "b", files))
    assert any("TuneD cannot find profile 'gone'" in n for n in b.notes), b.notes
    assert not _by(b, KnobId.thp("enabled")).startswith("TuneD")


def test_what_cannot_be_matched_is_said_only_where_it_decides(hosts, tmp_path):
    """A tree without the machine's name: a unit whose CPUs do not match is not applied,
    without a note on the unknown uname; one that only asks the uname is taken to apply."""
    files = {"/etc/tuned/active_profile": "db\n", **_profiles(db=(
        "[a]\ntype=vm\nuname_regex=aarch64\ncpuinfo_regex=CPU part.*0x0af\n"
        "transparent_hugepages=never\n[b]\ntype=sysctl\nuname_regex=aarch64\n"
        "vm.nr_hugepages=5\n"))}
    b = _boot(_tree(hosts / "no-pools", tmp_path / "a", files))
    assert not _by(b, KnobId.thp("enabled")).startswith("TuneD")
    assert any("[a]: its cpuinfo_regex does not match" in n for n in b.notes)
    assert not any("[a] here is not known" in n for n in b.notes), b.notes
    assert b.at_boot(KnobId.pool(2048)).value == "5"
    assert any("[b] here is not known" in n for n in b.notes), b.notes


def test_the_boot_view_prints_tuneds_sections_as_written(hosts, tmp_path):
    """check's table names the unit ("TuneD [vm] ...") and its notes the skipped one: the
    brackets are text, not the terminal library's markup."""
    from support import run_cli
    shipped = {"/usr/lib/tuned/throughput-performance/tuned.conf":
               (TUNED / "throughput-performance.conf").read_text(),
               "/etc/tuned/active_profile": "db\n", **X86,
               **_profiles(db="[main]\ninclude=throughput-performance\n"
                              "[vm]\ntransparent_hugepages=never\n")}
    root = _tree(hosts / "no-pools", tmp_path / "a", shipped)
    r = run_cli("check", "--root", str(root), "--verbose", env={"COLUMNS": "250"})
    assert r.returncode in (0, 1), r.stderr
    out = " ".join(r.stdout.split())
    assert "TuneD [vm] /etc/tuned/db/tuned.conf:4" in out, r.stdout[-3000:]
    assert "TuneD does not apply [vm.thunderx]" in out


def test_what_makes_tuned_refuse_or_ignore_a_units_condition(hosts, tmp_path):
    """A priority that is not a number, or a regex that does not compile, fails TuneD's whole
    profile; a TuneD before 2.13 has no uname_regex and applies the unit everywhere."""
    base = {**X86, "/etc/tuned/active_profile": "db\n"}
    for name, unit in (("priority", "[x]\ntype=sysfs\npriority=high\n"),
                       ("regex", "[x]\ntype=sysfs\nuname_regex=(arm\n")):
        b = _boot(_tree(hosts / "no-pools", tmp_path / name, {**base, **_profiles(
            db=unit + f"{THP}/enabled=never\n[vm]\ntransparent_hugepages=always\n")}))
        assert any(n.startswith("TuneD refuses the profile") for n in b.notes), b.notes
        assert not _by(b, KnobId.thp("enabled")).startswith("TuneD"), name
    arm_only = _profiles(db="[a]\ntype=sysctl\nuname_regex=aarch64\nvm.nr_hugepages=5\n")
    b = _boot(_tree(hosts / "no-pools", tmp_path / "new", {**base, **arm_only}))
    assert not _by(b, KnobId.pool(2048)).startswith("TuneD")
    old = VERSION.replace("MINOR = 20", "MINOR = 12")
    b = _boot(_tree(hosts / "no-pools", tmp_path / "old", {
        **base, **arm_only, "/usr/lib/python3/dist-packages/tuned/version.py": old}))
    assert b.at_boot(KnobId.pool(2048)).value == "5"


@pytest.mark.parametrize("db,why", [
    ("[x]\ntype=sysfs\nuname_regex=(arm\n[vm]\ntransparent_hugepages=never\n",
     "TuneD refuses the profile: [x]'s uname_regex"),
    ("[main]\ninclude=gone\n[vm]\ntransparent_hugepages=never\n",
     "TuneD cannot find profile 'gone'"),
])
def test_a_profile_tuned_refuses_gets_no_child_of_it(tmp_path, db, why):
    """TuneD applies none of a profile one of whose units has a regex that does not compile,
    or that includes one it cannot find, and would refuse a child that includes it just the
    same: apply persists the THP settings as where TuneD is absent, leaves TuneD's files
    alone, and says why."""
    from hpadvise.act.apply import prepare
    from hpadvise.changes.actions import File
    files = {**X86, f"{THP}/defrag": "always defer defer+madvise madvise [never]\n",
             "/etc/tuned/active_profile": "db\n", **_profiles(db=db)}
    root = _tree(GUESTS / "amd64-2node-membind", tmp_path / "refused", files)
    r = pipeline.inspect(SysRoot(str(root)), engine_names=["postgres"])
    assert r.host.boot.tuned_refused.startswith(why), r.host.boot.tuned_refused
    out = tmp_path / "persist"
    for d in ("etc/sysctl.d", "run/systemd/system"):  # systemd runs there
        (out / d).mkdir(parents=True)
    p = prepare(r, r.engines, restart=False, persist=True, read_only=True,
                persist_root=str(out))
    written = {str(s.action.path)[len(str(out)):]: File.decode(s.new) for s in p.steps
               if isinstance(s.action, File) and s.new is not None}
    assert not any(w.startswith("/etc/tuned") for w in written), written
    # the plan's defrag in apply's unit, as on a host without TuneD
    assert any("echo madvise > /sys/kernel/mm/transparent_hugepage/defrag" in text
               for text in written.values()), written
    assert any(n.startswith(why) and "apply again" in n for n in p.notices), p.notices


@pytest.fixture
def sources(hosts, tmp_path) -> boot.Boot:
    """A knob set by every kind of source: the kernel command line, a sysctl file, rc.local,
    TuneD's [sysctl] and [vm], and the sysctl file again after TuneD (reapply_sysctl)."""
    files = {**X86, "/etc/kernel/cmdline": "root=/dev/vda hugepages=3\n",
             "/etc/sysctl.d/70-db.conf": "vm.nr_hugepages = 5\n",
             "/etc/rc.local": f"#!/bin/sh\necho never > {THP}/defrag\n",
             "/etc/tuned/active_profile": "db\n", **_profiles(
                 db="[sysctl]\nvm.nr_hugepages=7\n[vm]\ntransparent_hugepage.defrag=always\n")}
    root = _tree(hosts / "no-pools", tmp_path / "sources", files)
    (root / "etc/rc.local").chmod(0o755)
    return _boot(root)


@pytest.mark.parametrize("knob,source,stage,path,plugin,reapplied", [
    (KnobId.pool(2048), "kernel command line (/etc/kernel/cmdline)", 0, None, None, False),
    (KnobId.pool(2048), "/etc/sysctl.d/70-db.conf:1", 1, "/etc/sysctl.d/70-db.conf", None,
     False),
    (KnobId.pool(2048), "TuneD [sysctl] /etc/tuned/db/tuned.conf:2", 4,
     "/etc/tuned/db/tuned.conf", "sysctl", False),
    (KnobId.pool(2048), "/etc/sysctl.d/70-db.conf:1 (re-applied by TuneD)", 4,
     "/etc/sysctl.d/70-db.conf", None, True),
    (KnobId.thp("defrag"), "/etc/rc.local:2", 3, "/etc/rc.local", None, False),
    (KnobId.thp("defrag"), "TuneD [vm] /etc/tuned/db/tuned.conf:4", 4,
     "/etc/tuned/db/tuned.conf", "vm", False),
    (KnobId.sysctl("vm.zone_reclaim_mode"), "kernel default (mm/vmscan.c node_reclaim_mode)",
     -1, None, None, False),
])
def test_each_setter_carries_where_it_comes_from_as_fields(sources, knob, source, stage, path,
                                                           plugin, reapplied):
    """What code reads of a setter (its file, TuneD's plugin, a re-application) is a field
    of its own; `source` is the words people read, the same as before."""
    (s,) = [s for s in sources.setters if s.knob == knob and s.source == source]
    assert (s.stage, s.path, s.plugin, s.reapplied) == (stage, path, plugin, reapplied)


def test_who_sets_a_knob_in_an_order_not_fixed_is_named_by_origin(sources):
    """The re-applied sysctl file comes last (it wins over TuneD's [sysctl]); rc.local and
    TuneD's [vm] both write defrag after the sysctl files, in no fixed order: each is named
    by its file, TuneD's with its plugin, without a line."""
    assert sources.at_boot(KnobId.pool(2048)).reapplied
    assert ("thp.defrag is written at boot by /etc/rc.local, TuneD [vm] /etc/tuned/db/tuned.conf,"
            " in an order that is not fixed: the value after boot may be any of theirs"
            ) in sources.notes, sources.notes


def test_an_earlier_applys_drop_in_that_tuned_applies_again_is_still_its_own(hosts, tmp_path):
    """TuneD's [sysctl] sets the group, then applies the sysctl files again: the value that
    wins at boot is hpadvise's own drop-in's, so the plan may move it as an earlier apply's
    (docs/check.md: a group someone set is never moved, one an earlier apply set may be).
    The words of such a setter once hid its file from that test."""
    from hpadvise.nextboot.boot_persist import own
    files = {**X86, "/etc/sysctl.d/60-hpadvise.conf": "vm.hugetlb_shm_group = 1001\n",
             "/etc/tuned/active_profile": "db\n",
             **_profiles(db="[sysctl]\nvm.hugetlb_shm_group=1005\n")}
    b = _boot(_tree(hosts / "no-pools", tmp_path / "own", files))
    at = b.at_boot(KnobId.sysctl("vm.hugetlb_shm_group"))
    assert at.reapplied and at.value == "1001" and at.path == "/etc/sysctl.d/60-hpadvise.conf"
    assert own(at)
