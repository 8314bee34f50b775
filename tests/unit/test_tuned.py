"""TuneD's profiles read as TuneD merges and applies them, on a captured host with Debian's
TuneD 2.20 files (tests/fixtures/tuned): units that do not match this host, the merged order
rather than the file order, priorities, disabled units, the version's own options, the command
line's THP mode; and the child profile apply writes, overriding each unit that sets a knob."""

import shutil
from pathlib import Path

from hpadvise.facts import boot, tuned
from hpadvise.facts.sysroot import SysRoot
from hpadvise.planning import pipeline

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


def _by(b: boot.Boot, knob: str) -> str:
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
    assert not _by(b, "thp.enabled").startswith("TuneD"), _by(b, "thp.enabled")
    assert any("TuneD does not apply [vm.thunderx]: its uname_regex does not match" in n
               for n in b.notes), b.notes
    # the same profile on a ThunderX2 (CPU part 0x0af): never, from that unit
    arm = GUESTS / "arm64-4k-pg32m"
    cpuinfo = (arm / "proc/cpuinfo").read_text().replace("CPU part\t: 0x051",
                                                        "CPU part\t: 0x0af")
    b = _boot(_tree(arm, tmp_path / "arm", {**shipped, "/proc/cpuinfo": cpuinfo,
                                            **X86, "/proc/sys/kernel/arch": "aarch64\n"}))
    s = b.at_boot("thp.enabled")
    assert s.value == "never" and s.source.startswith("TuneD [vm]"), s
    assert s.source.endswith("throughput-performance/tuned.conf:22")
    assert b.tuned_units["thp.enabled"] == (("vm.thunderx", "vm", "transparent_hugepages"),)


def test_units_apply_in_the_merged_order_and_only_options_the_version_takes(hosts, tmp_path):
    """A child's [sysfs] merges into the parent's [sysfs], which applies before the parent's
    [vm]: the [vm] value is the one left at boot, though the child's line comes later in the
    files. TuneD before 2.11 does not know [vm] transparent_hugepage.defrag."""
    files = {**X86, "/etc/tuned/active_profile": "db-local\n", **_profiles(
        db=f"[sysfs]\n{THP}/khugepaged/defrag=1\n[vm]\ntransparent_hugepage.defrag=always\n",
        db_local=f"[main]\ninclude=db\n[sysfs]\n{THP}/defrag=never\n")}
    b = _boot(_tree(hosts / "no-pools", tmp_path / "a", files))
    s = b.at_boot("thp.defrag")
    assert s.value == "always" and s.source == "TuneD [vm] /etc/tuned/db/tuned.conf:4", s
    assert b.tuned_units["thp.defrag"] == (("sysfs", "sysfs", f"{THP}/defrag"),
                                           ("vm", "vm", "transparent_hugepage.defrag"))
    old = VERSION.replace("MINOR = 20", "MINOR = 10")
    b = _boot(_tree(hosts / "no-pools", tmp_path / "b", {
        **files, "/usr/lib/python3/dist-packages/tuned/version.py": old}))
    assert b.tuned_version == (2, 10)
    assert b.at_boot("thp.defrag").value == "never"


def test_priority_disabled_units_and_the_command_line(hosts, tmp_path):
    """A unit of a lower priority applies first, whatever its place; a disabled unit not at
    all; [vm] transparent_hugepages yields to transparent_hugepage= on the command line."""
    files = {**X86, "/etc/tuned/active_profile": "db\n", **_profiles(db=(
        "[vm]\ntransparent_hugepages=never\n"
        f"[early]\ntype=sysfs\npriority=-10\n{THP}/enabled=always\n"
        f"[off]\ntype=sysfs\nenabled=false\n{THP}/shmem_enabled=always\n"))}
    b = _boot(_tree(hosts / "no-pools", tmp_path / "a", files))
    s = b.at_boot("thp.enabled")
    assert s.value == "never" and s.source.startswith("TuneD [vm]"), s
    assert b.tuned_units["thp.enabled"] == (("early", "sysfs", f"{THP}/enabled"),
                                            ("vm", "vm", "transparent_hugepages"))
    assert not _by(b, "thp.shmem_enabled").startswith("TuneD")
    assert "TuneD's [off] is disabled (enabled=false)" in b.notes
    grub = {"/etc/default/grub": 'GRUB_CMDLINE_LINUX="quiet transparent_hugepage=madvise"\n'}
    b = _boot(_tree(hosts / "no-pools", tmp_path / "b", {**files, **grub}))
    s = b.at_boot("thp.enabled")  # the [sysfs] unit still writes; [vm] leaves it alone
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


def test_the_child_profile_overrides_every_unit_that_sets_a_knob(tmp_path):
    """apply's child profile: the plan's defrag goes into both units of the parent that set it
    (the custom-named one says its type again), the plan's THP mode into the [vm] unit that
    sets it, and a knob no unit sets into its own plugin's unit ([vm] for defrag on 2.20,
    [sysfs] on 2.10)."""
    from hpadvise.act.apply import prepare
    from hpadvise.changes.actions import File

    def child(files: dict[str, str], name: str) -> str:
        root = _tree(GUESTS / "amd64-2node-membind", tmp_path / name, files)
        r = pipeline.inspect(SysRoot(str(root)), engine_names=["postgres"])
        out = tmp_path / f"{name}-persist"
        (out / "etc/sysctl.d").mkdir(parents=True)
        p = prepare(r, r.engines, restart=False, persist=True, read_only=True,
                    persist_root=str(out))
        [text] = [File.decode(s.new) for s in p.steps if isinstance(s.action, File)
                  and str(s.action.path).endswith("/etc/tuned/hpadvise/tuned.conf")]
        return text
    files = {**X86, "/sys/kernel/mm/transparent_hugepage/defrag":
             "always defer defer+madvise madvise [never]\n",
             "/etc/tuned/active_profile": "db\n", **_profiles(db=(
                 f"[thp]\ntype=sysfs\n{THP}/defrag=never\n"
                 "[vm]\ntransparent_hugepage.defrag=never\ntransparent_hugepages=never\n"))}
    text = child(files, "both")
    sections = [s.strip() for s in text.split("\n[")[1:]]
    assert f"thp]\ntype=sysfs\n{THP}/defrag=madvise" in sections, text
    vm = next(s for s in sections if s.startswith("vm]"))
    assert "transparent_hugepage.defrag=madvise" in vm and "transparent_hugepages=" in vm
    files["/etc/tuned/db/tuned.conf"] = "[vm]\ntransparent_hugepages=never\n"
    assert "\n[vm]\ntransparent_hugepage.defrag=madvise\n" in child(files, "none")
    files["/usr/lib/python3/dist-packages/tuned/version.py"] = VERSION.replace("= 20", "= 10")
    text = child(files, "old")
    assert f"\n[sysfs]\n{THP}/defrag=madvise\n" in text and "transparent_hugepage.defrag" \
        not in text, text
