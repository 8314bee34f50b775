"""The per-size THP files at boot: the kernel's defaults (the PMD size at inherit, every other
size at never) and thp_anon= / thp_shmem=, parsed as mm/huge_memory.c and mm/shmem.c parse
them, on captured trees: this VM's host and the guest lab's Debian sid kernel, which booted
with thp_anon=64K:always and came up with 64 KiB at always and 2 MiB at never."""

import json
import shutil
from pathlib import Path

from hpadvise.facts import boot
from hpadvise.facts.sysroot import SysRoot
from hpadvise.facts.thp_knobs import SIZES, SizesAtBoot, sizes_at_boot
from hpadvise.kit.knob_id import KnobId

from support import run_cli

ANON = (16, 32, 64, 128, 256, 512, 1024, 2048)  # x86-64's anonymous THP sizes
SID = Path(__file__).resolve().parent.parent / "fixtures" / "guests" / "amd64-sid-cma"


def test_the_parameter_as_the_kernel_reads_it():
    z = SIZES["enabled"]
    assert z.from_cmdline("64K:always", ANON) == {**{kb: "never" for kb in ANON}, 64: "always"}
    got = z.from_cmdline("16K-64K:always;2M:inherit;32K,1M:madvise", ANON)
    assert got == {16: "always", 32: "madvise", 64: "always", 128: "never", 256: "never",
                   512: "never", 1024: "madvise", 2048: "inherit"}
    # a later instance of the parameter starts from what the earlier one gave
    assert z.from_cmdline("2M:inherit", ANON, {64: "always"})[64] == "always"
    # sizes as memparse() reads them: any case, what follows the suffix ignored, hex; a
    # range's end is what follows its first dash
    assert z.from_cmdline("64kB:always", ANON)[64] == "always"
    assert z.from_cmdline("0x10000,2MiB:madvise", ANON) == {
        **{kb: "never" for kb in ANON}, 64: "madvise", 2048: "madvise"}
    assert z.from_cmdline("16K-32K-64K:always", ANON)[64] == "never"
    # what the kernel refuses as a whole: a size it does not offer or that is no power of
    # two, a range the wrong way round or without an end, a word of another file (shmem's
    # advise), no mode at all
    for bad in ("3K:always", "4M:always", "65537:always", "64K-16K:always", "64K-:always",
                "64K:advise", "64K", "64K:"):
        assert z.from_cmdline(bad, ANON) is None, bad
    assert SIZES["shmem_enabled"].from_cmdline("64K:advise", ANON)[64] == "advise"
    assert SIZES["shmem_enabled"].from_cmdline("64K:madvise", ANON) is None


def test_a_kernel_before_the_parameter_ignores_it():
    sizes = {"enabled": ANON}
    params = [("thp_anon", "64K:always")]
    assert SizesAtBoot(sizes, 2048, (6, 11)).from_cmdline(params) == []
    got = dict(SizesAtBoot(sizes, 2048, (6, 12)).from_cmdline(params))
    assert got[KnobId.thp("enabled", 64)] == "always"
    assert got[KnobId.thp("enabled", 2048)] == "never"
    # shmem's arrived a release later
    shm = SizesAtBoot({"shmem_enabled": ANON}, 2048, (6, 12))
    assert shm.from_cmdline([("thp_shmem", "64K:always")]) == []


def test_defaults_and_the_next_boots_command_line(hosts, tmp_path):
    b = boot.read(SysRoot(hosts / "no-pools"), 2048)
    pmd, small = b.at_boot(KnobId.thp("enabled", 2048)), b.at_boot(KnobId.thp("enabled", 64))
    assert (pmd.value, pmd.stage, small.value) == ("inherit", -1, "never")
    assert "mm/huge_memory.c" in pmd.source
    assert b.at_boot(KnobId.thp("shmem_enabled", 2048)).source == "kernel default (mm/shmem.c)"
    root = tmp_path / "root"
    shutil.copytree(hosts / "no-pools", root, symlinks=True)
    (root / "etc" / "kernel").mkdir(parents=True)
    (root / "etc" / "kernel" / "cmdline").write_text("root=/dev/vda thp_anon=64K:always "
                                                    "thp_shmem=2M:advise\n")
    b = boot.read(SysRoot(root), 2048)
    for knob, value in ((KnobId.thp("enabled", 64), "always"),
                        (KnobId.thp("enabled", 2048), "never"),
                        (KnobId.thp("shmem_enabled", 2048), "advise"),
                        (KnobId.thp("shmem_enabled", 64), "never")):
        s = b.at_boot(knob)
        assert (s.value, s.stage) == (value, 0), knob
        assert s.source == "kernel command line (/etc/kernel/cmdline)"
    # without hpage_pmd_size, the largest anonymous size is the PMD size
    (root / "sys" / "kernel" / "mm" / "transparent_hugepage" / "hpage_pmd_size").unlink()
    assert sizes_at_boot(SysRoot(root)).pmd_kb == 2048
    # a kernel that predates the parameters keeps its defaults
    (root / "proc" / "sys" / "kernel" / "osrelease").write_text("6.10.3\n")
    s = boot.read(SysRoot(root), 2048).at_boot(KnobId.thp("enabled", 2048))
    assert (s.value, s.stage) == ("inherit", -1)


def test_a_size_the_command_line_sets_and_apply_cannot_persist():
    """The sid guest: no systemd, GRUB or TuneD. The plan puts 2 MiB back to inherit and 64 KiB
    down to the top level's madvise; the next boot's thp_anon= gives them back their values,
    which check says (not persisted), and apply is not refused for it."""
    r = run_cli("check", "--json", "--root", str(SID))
    d = json.loads(r.stdout)
    view = {k["knob"]: k for k in d["plan"]["boot"]}
    pmd = view["thp.hugepages-2048kB/enabled"]
    assert (pmd["now"], pmd["at_boot"], pmd["plan"]) == ("never", "never", "inherit")
    assert pmd["source"] == "kernel command line (/proc/cmdline (this boot's))"
    assert view["thp.hugepages-64kB/enabled"]["at_boot"] == "always"
    lost = [f for f in d["findings"] if f["code"] == "boot.not_persisted"
            and "hugepages-" in f["title"]]
    assert len(lost) == 2 and all("Only thp_anon= on the kernel command line" in f["rationale"]
                                  for f in lost)
    assert not [f for f in d["findings"] if f["code"] == "boot.overridden"]
    assert not d["plan"]["blocked"]


def test_the_command_lines_top_level_mode_still_overrides(tmp_path):
    """transparent_hugepage= on the command line of a host apply cannot persist on: the
    next boot undoes the plan, and apply is refused for it (the command line is the thing
    to change), as before the per-size files were read."""
    root = tmp_path / "sid"
    shutil.copytree(SID, root, symlinks=True)
    cmdline = root / "proc" / "cmdline"
    cmdline.write_text(cmdline.read_text().strip() + " transparent_hugepage=always\n")
    d = json.loads(run_cli("check", "--json", "--root", str(root)).stdout)
    over = [f for f in d["findings"] if f["code"] == "boot.overridden"]
    assert [f["title"] for f in over] == [
        "The next boot would set THP enabled to always, not the planned madvise"]
    assert any("THP enabled" in b for b in d["plan"]["blocked"])
    assert not [b for b in d["plan"]["blocked"] if "hugepages-" in b]


def test_transparent_hugepage_shmem_needs_6_13(hosts, tmp_path):
    """transparent_hugepage_shmem= came with thp_shmem= in 6.13: an older kernel ignores it, so
    the boot view does not count it and apply does not write it into GRUB's command line (the
    unit or a boot script has to set shmem_enabled there)."""
    from hpadvise.act.persist import BootValue, grub_cmdline
    root = tmp_path / "root"
    shutil.copytree(hosts / "no-pools", root, symlinks=True)
    (root / "etc" / "kernel").mkdir(parents=True)
    (root / "etc" / "kernel" / "cmdline").write_text(
        "root=/dev/vda transparent_hugepage_shmem=advise transparent_hugepage=never\n")
    for release, shmem in (("6.18.4\n", ("advise", 0)), ("6.12.9\n", ("never", -1))):
        (root / "proc" / "sys" / "kernel" / "osrelease").write_text(release)
        b = boot.read(SysRoot(root), 2048)
        s = b.at_boot(KnobId.thp("shmem_enabled"))
        assert (s.value, s.stage) == shmem, release
        assert b.at_boot(KnobId.thp("enabled")).value == "never"  # transparent_hugepage= is old
    want = [BootValue("madvise", thp=KnobId.thp("enabled")),
            BootValue("advise", thp=KnobId.thp("shmem_enabled"))]
    text, left = grub_cmdline('GRUB_CMDLINE_LINUX="quiet"\n', want, (6, 1))
    assert text == 'GRUB_CMDLINE_LINUX="quiet transparent_hugepage=madvise"\n'
    assert [b.thp for b in left] == [KnobId.thp("shmem_enabled")]
    text, left = grub_cmdline('GRUB_CMDLINE_LINUX="quiet"\n', want, (6, 13))
    assert "transparent_hugepage_shmem=advise" in text and not left


def test_the_next_boots_kernel_is_the_boot_entrys(tmp_path):
    """The trixie guest runs 6.12; its GRUB's first entry starts 6.16 with
    transparent_hugepage_shmem=advise, which 6.16 takes and 6.12 would not, and 6.16 was
    built with THP `enabled` at madvise where 6.12 was built with always. A BLS entry names
    its kernel by `version`; an image whose configuration is not there leaves the default
    unknown rather than this kernel's."""
    trixie = SID.parent / "amd64-trixie-cma"
    nxt = "6.16.3+deb13-amd64"
    config = (trixie / "boot" / "config-6.12.117+deb13-amd64").read_text().replace(
        "CONFIG_TRANSPARENT_HUGEPAGE_ALWAYS=y", "# CONFIG_TRANSPARENT_HUGEPAGE_ALWAYS is not set"
    ).replace("# CONFIG_TRANSPARENT_HUGEPAGE_MADVISE is not set",
              "CONFIG_TRANSPARENT_HUGEPAGE_MADVISE=y")
    grub = (f"menuentry 'Debian' {{\n\tlinux\t/boot/vmlinuz-{nxt} root=/dev/vda1 ro "
            "transparent_hugepage_shmem=advise\n}\n")
    bls = (f"title Debian\nversion {nxt}\nlinux /vmlinuz-{nxt}\n"
           "options root=/dev/vda1 transparent_hugepage_shmem=advise\n")
    for name, files in (("grub", {"boot/grub/grub.cfg": grub, f"boot/config-{nxt}": config}),
                        ("bls", {"boot/loader/entries/a.conf": bls,
                                 f"boot/config-{nxt}": config}),
                        ("noconfig", {"boot/grub/grub.cfg": grub})):
        root = tmp_path / name
        shutil.copytree(trixie, root, symlinks=True)
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        b = boot.read(SysRoot(root), 2048)
        assert (b.release, b.kernel) == (nxt, (6, 16)), name
        assert any(f"the next boot starts kernel {nxt}" in n for n in b.notes), b.notes
        s = b.at_boot(KnobId.thp("shmem_enabled"))
        assert (s.value, s.stage) == ("advise", 0), (name, s)
        enabled = b.at_boot(KnobId.thp("enabled"))
        if name == "noconfig":
            assert enabled is None or "ALWAYS" not in enabled.source, enabled
        else:
            assert (enabled.value, enabled.source) == (
                "madvise", "kernel default (CONFIG_TRANSPARENT_HUGEPAGE_MADVISE)"), enabled


def test_boot_entries_as_their_loaders_read_them(tmp_path):
    """A `linux` line without arguments is an empty command line (not the next line's
    initrd); RHEL 7's BIOS GRUB says `linux16`; BLS entries sort by version (6.10 after
    6.9)."""
    from hpadvise.facts.boot_cmdline import next_boot
    sizes = SizesAtBoot({}, 2048, (6, 1))
    for name, files, want in (
            ("bare", {"boot/grub/grub.cfg": "menuentry 'D' {\n\tlinux\t/boot/vmlinuz-6.1.0-18-amd64"
                      "\n\tinitrd\t/boot/initrd.img-6.1.0-18-amd64\n}\n"}, ("", "6.1.0-18-amd64")),
            ("rhel7", {"boot/grub2/grub.cfg": "menuentry 'R' {\n\tlinux16 /vmlinuz-3.10.0-1160"
                       ".el7.x86_64 root=/dev/sda1 hugepages=8\n}\n"},
             ("root=/dev/sda1 hugepages=8", "3.10.0-1160.el7.x86_64")),
            ("bls", {"boot/loader/entries/m-6.9.0.conf": "version 6.9.0\noptions a=1\n",
                     "boot/loader/entries/m-6.10.0.conf": "version 6.10.0\noptions b=2\n"},
             ("b=2", "6.10.0"))):
        root = tmp_path / name
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        nb = next_boot(SysRoot(root), sizes)
        assert (nb.cmdline, nb.release) == want, (name, nb)
