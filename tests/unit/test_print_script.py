"""`apply --print-script` on a copy of a captured host's /sys: the script makes the plan's
changes, and when a step fails it puts back the steps before it (and the failed one), newest
first, and exits non-zero, as apply itself does; interrupted, the same."""

import shutil
import subprocess

from hpadvise.act import apply
from hpadvise.act.script import script
from hpadvise.api import profiles
from hpadvise.api.engines import registry
from hpadvise.facts import host
from hpadvise.facts.sysroot import SysRoot
from hpadvise.planning import plan

THP = "sys/kernel/mm/transparent_hugepage"


def _set(root, name, value):
    p = root / THP / name
    words = p.read_text().replace("[", "").replace("]", "").split()
    p.write_text(" ".join(f"[{w}]" if w == value else w for w in words) + "\n")


def _word(root, name):
    text = (root / THP / name).read_text()
    return text.split("[")[1].split("]")[0] if "[" in text else text.strip()


def _plan(hosts, tmp_path):
    root = tmp_path / "host"
    shutil.copytree(hosts / "mthp-always", root, symlinks=True)
    _set(root, "enabled", "always")
    _set(root, "defrag", "always")
    r = plan.build(host.collect(SysRoot(root)), [],
                   profiles.load("oltp", registry.profile_schemas()), {})
    ap = apply.prepare(r, {}, restart=False, persist=False, read_only=True, sys_root=str(root))
    targets = [s.action.path.split(f"{THP}/")[1] for s in ap.changes]
    assert targets == ["enabled", "defrag", "hugepages-2048kB/enabled"], targets
    return root, ap


def test_the_script_makes_the_changes(hosts, tmp_path):
    root, ap = _plan(hosts, tmp_path)
    r = subprocess.run(["sh", "-c", script(ap)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert [_word(root, n) for n in ("enabled", "defrag", "hugepages-2048kB/enabled")] == [
        "madvise", "madvise", "inherit"]


def test_a_failing_step_undoes_the_ones_before_it(hosts, tmp_path):
    root, ap = _plan(hosts, tmp_path)
    shutil.rmtree(root / THP / "hugepages-2048kB")  # the third step cannot be written
    r = subprocess.run(["sh", "-c", script(ap)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "step 3 of 3 failed" in r.stderr, r.stderr
    assert [_word(root, n) for n in ("enabled", "defrag")] == ["always", "always"]


def test_an_interrupted_script_undoes_too(hosts, tmp_path):
    root, ap = _plan(hosts, tmp_path)
    text = script(ap).replace("step=3\n", "step=3\nkill -TERM $$\n")  # stopped at step 3
    r = subprocess.run(["sh", "-c", text], capture_output=True, text=True)
    assert r.returncode == 130, (r.returncode, r.stderr)
    assert [_word(root, n) for n in ("enabled", "defrag", "hugepages-2048kB/enabled")] == [
        "always", "always", "always"]


def test_a_setting_in_a_file_is_undone_byte_for_byte_unless_it_holds_a_secret(tmp_path):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "example"))
    from hpdemo import DemoSetting
    conf = tmp_path / "demo.conf"
    conf.write_text("# mine\nbuffer_mb = 64\nhuge_pages = off\n")
    a = DemoSetting("huge_pages", "on", str(conf))
    old = a.get()  # what apply journals as the old value
    conf.write_text("changed\n")  # the script's step (and whatever else) since
    subprocess.run(["sh", "-c", "\n".join(a.undo_shell(old))], check=True)
    assert conf.read_text() == "# mine\nbuffer_mb = 64\nhuge_pages = off\n"
    conf.write_text("password = s3cret\nhuge_pages = off\n")
    lines = a.undo_shell(a.get())
    assert not any("s3cret" in ln for ln in lines) and "by hand" in " ".join(lines)
