"""apply's machinery on a copy of a captured host (writes go to the copy, never to the live
kernel): journal, rollback, idempotence, refusals, a knob that cannot be written."""

import dataclasses
import os
import shutil

import pytest

from hpadvise.act.persist import BootValue, grub_cmdline

from hpadvise.act import apply
from hpadvise.facts import host
from hpadvise.ledger import journal
from hpadvise.planning import plan
from hpadvise.api import profiles
from hpadvise.changes.actions import File
from hpadvise.api.engines import Demand, Instance, registry
from hpadvise.kit.errors import InputError
from hpadvise.facts.sysroot import SysRoot
from hpadvise.kit.knob_id import KnobId


@pytest.fixture
def root(hosts, tmp_path):
    r = tmp_path / "host"
    shutil.copytree(hosts / "thp-always", r, symlinks=True)
    return r


def make_report(root, pages=100, **prof):
    h = host.collect(SysRoot(root))
    i = Instance("test", "t:1", "t", False)
    i.demand = Demand("t:1", None, 2048, {2048: pages}, True, "test")
    p = dataclasses.replace(profiles.load("oltp", registry.profile_schemas()), **prof)
    return plan.build(h, [i], p, {})


def snapshot(root, *etc_dirs):
    """The knobs' values as the kernel would report them (a plain file in a copied tree does
    not keep sysfs's "[choice]" format), and the bytes of every file under `etc_dirs`."""
    h = host.collect(SysRoot(root))
    out = {"pools": [(p.size_kb, p.nr_pages) for p in h.pools],
           "thp": (h.thp.enabled.value, h.thp.defrag.value, h.thp.shmem_enabled.value)}
    for d in etc_dirs:
        for p in sorted(d.rglob("*")):
            if p.is_file():
                out[str(p)] = p.read_bytes()
    return out


def test_apply_then_rollback_restores_every_byte(root, tmp_path):
    etc = tmp_path / "etc-root"
    (etc / "etc/default").mkdir(parents=True)
    (etc / "etc/default/grub").write_text('GRUB_CMDLINE_LINUX="quiet"\n')
    before = snapshot(root, etc)
    r = make_report(root)
    ap = apply.prepare(r, {}, restart=False, persist=True, sys_root=str(root),
                       persist_root=str(etc))
    kinds = [s.action.kind for s in ap.changes]
    assert kinds == ["compact", "pool", "sysfs_choice", "sysfs_choice", "sysfs_choice",
                     "directory", "file", "file"]  # etc/sysctl.d is created, journaled
    res = apply.execute(ap, str(tmp_path / "journal"), {"argv": []})
    assert res.status == "ok"
    assert (root / "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text() == "101"
    assert (root / "sys/kernel/mm/transparent_hugepage/enabled").read_text() == "madvise"
    grub = (etc / "etc/default/grub").read_text()
    assert "transparent_hugepage=madvise" in grub and "transparent_hugepage_shmem=never" in grub
    assert "vm.nr_hugepages = 101" in (etc / "etc/sysctl.d/60-hpadvise.conf").read_text()

    # idempotent: the same plan on the changed host changes nothing. (A copied tree does not
    # keep the kernel's books: a new pool's pages are free, as the kernel would report.)
    (root / "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages").write_text("101\n")
    ap2 = apply.prepare(make_report(root), {}, restart=False, persist=True,
                        sys_root=str(root), persist_root=str(etc))
    assert ap2.changes == []

    j = journal.find(str(tmp_path / "journal"), None)
    done, errors = journal.rollback(j)
    assert not errors and done
    assert snapshot(root, etc) == before
    assert not (etc / "etc/sysctl.d").exists()  # the directory apply made is gone again


def test_missing_knob_refuses_before_changing_anything(root, tmp_path):
    (root / "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").unlink()
    before = snapshot(root)
    r = make_report(root)
    with pytest.raises(InputError, match="cannot read .*nr_hugepages.*nothing was changed"):
        apply.prepare(r, {}, restart=False, persist=False, sys_root=str(root))
    assert snapshot(root) == before


def test_knob_that_cannot_be_written_rolls_back(root, tmp_path):
    knob = root / "sys/kernel/mm/transparent_hugepage/shmem_enabled"
    knob.unlink()
    # a read-only file of the live kernel: reading works, writing fails even for root
    os.symlink("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", knob)
    before = snapshot(root)
    r = make_report(root)
    ap = apply.prepare(r, {}, restart=False, persist=False, sys_root=str(root))
    res = apply.execute(ap, str(tmp_path / "journal"), {"argv": []})
    assert res.status == "failed" and "cannot write" in res.problems[0]
    assert snapshot(root) == before


def test_blocked_plan_is_refused(root):
    r = make_report(root, pages=11000)  # ~21.5 GiB of 23.5: under the 20% floor
    assert r.blocked
    with pytest.raises(InputError, match="refusing to apply: .*floor"):
        apply.prepare(r, {}, restart=False, persist=False, sys_root=str(root))


def test_refuses_to_take_pages_in_use(hosts, tmp_path):
    # pg-hugetlb: 72 pages held by a running instance that now needs fewer (a lower
    # shared_buffers waiting for a restart): the plan must not shrink the pool under it.
    h = host.collect(SysRoot(hosts / "pg-hugetlb"))
    i = Instance("test", "t:1", "t", True)
    i.backing, i.backing_page_kb = "hugetlb", 2048
    i.demand = Demand("t:1", None, 2048, {2048: 40}, True, "test", held_pages=72)
    r = plan.build(h, [i], profiles.load("oltp", registry.profile_schemas()), {})
    with pytest.raises(InputError, match="refusing to shrink .* 72 pages are in use"):
        apply.prepare(r, {}, restart=False, persist=False, sys_root=str(tmp_path))


@pytest.mark.parametrize("before,boot,after", [
    ('GRUB_CMDLINE_LINUX=""\n', [BootValue("never", thp=KnobId.thp("enabled"))],
     'GRUB_CMDLINE_LINUX="transparent_hugepage=never"\n'),
    ('GRUB_CMDLINE_LINUX="ro hugepagesz=1G hugepages=4 transparent_hugepage=always"\n',
     [BootValue("9", size_kb=1048576), BootValue("madvise", thp=KnobId.thp("enabled"))],
     'GRUB_CMDLINE_LINUX="ro hugepagesz=1G hugepages=9 transparent_hugepage=madvise"\n'),
    ('X=1\n', [BootValue("madvise", thp=KnobId.thp("enabled"))],
     'X=1\nGRUB_CMDLINE_LINUX="transparent_hugepage=madvise"\n'),
])
def test_grub_cmdline(before, boot, after):
    text, left = grub_cmdline(before, boot)
    assert text == after and left == []


def test_defrag_is_not_a_kernel_parameter():
    _, left = grub_cmdline("", [BootValue("madvise", thp=KnobId.thp("defrag"))])
    assert left == [BootValue("madvise", thp=KnobId.thp("defrag"))]
    assert left[0].path == "/sys/kernel/mm/transparent_hugepage/defrag"


def test_file_action_keeps_mode_and_restores_absence(tmp_path):
    p = tmp_path / "f.conf"
    a = File(str(p))
    assert a.get() is None
    a.set(File.encode("one\n"))
    os.chmod(p, 0o640)
    a.set(File.encode("two\n"))
    assert p.read_text() == "two\n" and oct(p.stat().st_mode & 0o777) == "0o640"
    a.restore(None)
    assert not p.exists()
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".hpadvise-")]


def test_torn_last_line_is_tolerated_but_corruption_is_not(tmp_path):
    d = tmp_path / "j"
    journal.open_dir(str(d))
    j = journal.Journal.create(str(d), {"argv": []})
    a = File(str(tmp_path / "x"))
    j.intent(a, None, File.encode("x"))
    with open(j.path, "a") as f:
        f.write('{"type": "done", "n": 1, "act')  # killed mid-write
    loaded = journal.Journal.load(j.path)
    assert loaded.status == "interrupted" and len(loaded.entries) == 1
    assert not loaded.entries[0].done and loaded.entries[0].old is None
    with open(j.path, "a") as f:
        f.write('\n{"type": "end", "status": "ok"}\n')
    with pytest.raises(InputError, match="corrupt at line 3"):
        journal.Journal.load(j.path)


def test_pool_get_is_the_persistent_count(root):
    """sysfs nr_hugepages counts surplus pages; the value to restore is nr - surplus."""
    from hpadvise.changes.actions import Pool
    d = root / "sys/kernel/mm/hugepages/hugepages-2048kB"
    (d / "nr_hugepages").write_text("72\n")
    (d / "surplus_hugepages").write_text("72\n")  # a lowered pool still in use
    assert Pool(2048, root=str(root)).get() == 0
    h = host.collect(SysRoot(root))
    assert h.pool(2048).nr_pages == 72 and h.pool(2048).persistent_pages == 0


def test_print_script_appends_to_an_option_file_it_cannot_read(tmp_path):
    """A plan made by a user who cannot read the server's option file: the script appends the
    setting (the last occurrence wins) and says why, instead of rewriting a file it never saw."""
    from hpadvise.act.apply import Step, describe, ApplyPlan
    from hpadvise.plugins.mysql.actions import MyOption
    unreadable = tmp_path / "my.cnf"
    unreadable.mkdir()  # reading it fails, for root too
    a = MyOption(str(unreadable), "large_pages", "ON", False, instance="mysql:3306")
    lines = a.shell(a.wanted)
    assert lines[0].startswith(f"# file {unreadable} is a directory") \
        and "last occurrence" in lines[0]
    assert "\n".join(lines[1:]) == f"cat >> {unreadable} <<'HPADVISE_EOF'\n[mysqld]\n" \
        "large_pages = ON\nHPADVISE_EOF"
    s = Step(a, a.wanted, "profile", "engine", unread="cannot read it")
    assert s.needed
    assert describe(ApplyPlan(None, [], [s])) == \
        [f"large_pages in {unreadable}: set (current value unknown: cannot read it)"]
