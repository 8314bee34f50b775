"""What the next boot sets, read from crafted /etc and /boot trees on top of a captured host:
sysctl file order (shadowing, masking, /etc/sysctl.conf last under procps), GRUB with and
without THP parameters, BLS entries, a disable-THP unit, rc.local, TuneD include chains; and
where apply puts the plan so that it wins."""

import json
import os
import shutil

from hpadvise.facts import boot
from hpadvise.nextboot import boot_persist
from hpadvise.planning import pipeline
from hpadvise.facts.sysroot import SysRoot
from hpadvise.kit.knob_id import KnobId

from support import run_cli


def _tree(hosts, tmp_path, files: dict[str, str], state="pg-hugetlb", modes=None):
    root = tmp_path / "root"
    shutil.copytree(hosts / state, root, symlinks=True)
    for rel, text in files.items():
        p = root / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        if text.startswith("->"):
            os.symlink(text[2:], p)
        else:
            p.write_text(text)
    for rel, mode in (modes or {}).items():
        os.chmod(root / rel.lstrip("/"), mode)
    return root


def _boot(root):
    return boot.read(SysRoot(root), 2048)


def test_sysctl_files_sort_together_shadow_and_mask(hosts, tmp_path):
    root = _tree(hosts, tmp_path, {
        "/usr/lib/sysctl.d/50-vendor.conf": "vm.nr_hugepages = 10\n",
        "/usr/lib/sysctl.d/70-shadowed.conf": "vm.nr_hugepages = 11\n",
        "/etc/sysctl.d/70-shadowed.conf": "# the admin's copy wins by name\nvm.nr_hugepages=12\n",
        "/usr/lib/sysctl.d/80-masked.conf": "vm.nr_hugepages = 13\n",
        "/etc/sysctl.d/80-masked.conf": "->/dev/null",
        "/run/sysctl.d/60-run.conf": "vm/nr_hugepages = 14\n",
    })
    b = _boot(root)
    pools = [(s.value, s.source) for s in b.setters if s.knob == KnobId.pool(2048)]
    assert [v for v, _ in pools] == ["10", "14", "12"]
    assert pools[-1][1] == "/etc/sysctl.d/70-shadowed.conf:2"
    assert b.at_boot(KnobId.pool(2048)).value == "12"


def test_etc_sysctl_conf_is_last_for_procps_only(hosts, tmp_path):
    files = {"/etc/sysctl.d/99-late.conf": "vm.nr_hugepages = 100\n",
             "/etc/sysctl.conf": "vm.nr_hugepages = 77\n"}
    b = _boot(_tree(hosts, tmp_path, files))
    assert b.sysctl_engine == "procps" and b.at_boot(KnobId.pool(2048)).value == "77"
    b = _boot(_tree(hosts, tmp_path / "sd", {**files, "/run/systemd/system/x": ""}))
    assert b.sysctl_engine == "systemd-sysctl" and b.at_boot(KnobId.pool(2048)).value == "100"


def test_grub_default_generated_config_and_bls(hosts, tmp_path):
    grub = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX="hugepagesz=1G ' \
        'hugepages=4 transparent_hugepage=never"\n'
    b = _boot(_tree(hosts, tmp_path, {"/etc/default/grub": grub}))
    assert b.at_boot(KnobId.thp("enabled")).value == "never"
    assert b.at_boot(KnobId.pool(1048576)).value == "4" and b.grub
    # the generated config is what boots: without update-grub the new line is not there yet
    cfg = "menuentry 'Debian' {\n  linux /vmlinuz root=/dev/vda1 ro quiet\n}\n"
    b = _boot(_tree(hosts, tmp_path / "g", {"/etc/default/grub": grub,
                                            "/boot/grub/grub.cfg": cfg}))
    s = b.at_boot(KnobId.thp("enabled"))  # the kernel's default, or unknown without its config
    assert s is None or s.stage == -1
    assert any("update-grub" in n for n in b.notes)
    # BLS: the newest entry's options
    b = _boot(_tree(hosts, tmp_path / "b", {
        "/boot/loader/entries/a-6.1.conf": "title old\noptions root=x hugepages=5\n",
        "/boot/loader/entries/b-6.8.conf": "title new\noptions root=x hugepages=64 "
                                           "transparent_hugepage=madvise\n"}))
    assert b.at_boot(KnobId.pool(2048)).value == "64" and "b-6.8.conf" in b.cmdline_source
    # without any boot loader configuration this boot's command line stands in
    b = _boot(_tree(hosts, tmp_path / "n", {}))
    assert "this boot" in b.cmdline_source and b.notes


def test_disable_thp_unit_and_rc_local(hosts, tmp_path):
    unit = ("[Unit]\nDescription=Disable THP\n[Service]\nType=oneshot\nExecStart=/bin/sh -c "
            "'echo never > /sys/kernel/mm/transparent_hugepage/enabled && echo never > "
            "/sys/kernel/mm/transparent_hugepage/defrag'\n[Install]\nWantedBy=basic.target\n")
    root = _tree(hosts, tmp_path, {
        "/run/systemd/system/x": "",
        "/etc/systemd/system/disable-thp.service": unit,
        "/etc/systemd/system/basic.target.wants/disable-thp.service":
            "->/etc/systemd/system/disable-thp.service",
        "/etc/systemd/system/not-enabled.service": unit.replace("never", "always"),
        "/etc/rc.local": "#!/bin/sh\necho 64 > /sys/kernel/mm/hugepages/hugepages-2048kB/"
                         "nr_hugepages\nexit 0\n"}, modes={"/etc/rc.local": 0o755})
    b = _boot(root)
    assert b.at_boot(KnobId.thp("enabled")).value == "never"
    assert "disable-thp.service" in b.at_boot(KnobId.thp("defrag")).source
    assert not [s for s in b.setters if "not-enabled" in s.source]
    assert b.at_boot(KnobId.pool(2048)).source == "/etc/rc.local:2"


def test_tuned_include_chain_and_reapplied_sysctl(hosts, tmp_path):
    root = _tree(hosts, tmp_path, {
        "/usr/sbin/tuned": "",
        "/etc/tuned/active_profile": "postgresql\n",
        "/usr/lib/tuned/throughput-performance/tuned.conf":
            "[vm]\ntransparent_hugepages=always\n[sysctl]\nvm.nr_hugepages=8\n",
        "/usr/lib/tuned/postgresql/tuned.conf":
            "[main]\ninclude=throughput-performance\n[vm]\ntransparent_hugepages=never\n",
        "/etc/sysctl.d/60-pool.conf": "vm.nr_hugepages = 50\n"})
    b = _boot(root)
    assert b.tuned_profile == "postgresql"
    assert [f.split("/")[-2] for f in b.tuned_files] == ["throughput-performance", "postgresql"]
    s = b.at_boot(KnobId.thp("enabled"))
    assert s.value == "never" and "postgresql/tuned.conf" in s.source
    # TuneD applies the system's sysctl files again after its [sysctl] (reapply_sysctl)
    assert b.at_boot(KnobId.pool(2048)).value == "50"
    root2 = _tree(hosts, tmp_path / "x", {
        "/usr/sbin/tuned": "", "/etc/tuned/active_profile": "throughput-performance\n",
        "/etc/tuned/tuned-main.conf": "reapply_sysctl = 0\n",
        "/usr/lib/tuned/throughput-performance/tuned.conf": "[sysctl]\nvm.nr_hugepages=8\n",
        "/etc/sysctl.d/60-pool.conf": "vm.nr_hugepages = 50\n"})
    assert _boot(root2).at_boot(KnobId.pool(2048)).value == "8"


def test_plan_persistence_outranks_later_files_and_refuses_what_it_cannot(hosts, tmp_path):
    b = _boot(_tree(hosts, tmp_path, {"/etc/sysctl.d/99-other.conf": "vm.nr_hugepages = 100\n"}))
    per = boot_persist.persistence(b, {KnobId.pool(2048): "73"}, 2048)
    assert per.sysctl_name == boot_persist.SYSCTL_LATE and not per.blocked
    assert boot_persist.after_apply(b, per).at_boot(KnobId.pool(2048)).value == "73"
    b = _boot(_tree(hosts, tmp_path / "c", {"/etc/sysctl.conf": "vm.nr_hugepages = 77\n"}))
    per = boot_persist.persistence(b, {KnobId.pool(2048): "73"}, 2048)
    assert per.blocked and per.blocked[0][1].source == "/etc/sysctl.conf:1"
    # under TuneD the THP knobs go into a child profile
    b = _boot(_tree(hosts, tmp_path / "t", {
        "/usr/sbin/tuned": "", "/etc/tuned/active_profile": "postgresql\n",
        "/usr/lib/tuned/postgresql/tuned.conf": "[vm]\ntransparent_hugepages=never\n"}))
    enabled, pool = KnobId.thp("enabled"), KnobId.pool(2048)
    per = boot_persist.persistence(b, {enabled: "madvise", pool: "73"}, 2048)
    assert per.tuned == {enabled: "madvise"} and per.sysctl == {pool: "73"}
    assert boot_persist.after_apply(b, per).at_boot(KnobId.thp("enabled")).value == "madvise"


def test_check_shows_three_ways_and_the_crit_finding_before_apply(hosts, tmp_path):
    root = _tree(hosts, tmp_path, {"/etc/sysctl.conf": "vm.nr_hugepages = 7\n"})
    r = run_cli("check", "--json", "--db", "postgres", "--root", str(root))
    d = json.loads(r.stdout)
    view = {k["knob"]: k for k in d["plan"]["boot"]}
    pool = view["pool.2048"]
    assert pool["at_boot"] == "7" and pool["source"] == "/etc/sysctl.conf:1"
    assert pool["plan"] is not None and int(pool["plan"]) > 7
    codes = {f["code"]: f for f in d["findings"]}
    assert codes["boot.overridden"]["severity"] == "crit"
    assert "/etc/sysctl.conf:1" in codes["boot.overridden"]["rationale"]
    # the instance on huge pages now would not get its pages back after a reboot
    assert codes["boot.instance_breaks"]["severity"] == "crit"
    assert d["plan"]["blocked"]
    # the same host without the competitor: nothing to say about the boot
    r = pipeline.inspect(SysRoot(hosts / "pg-hugetlb"), engine_names=["postgres"])
    assert "boot.overridden" not in {f.code for f in r.findings}
