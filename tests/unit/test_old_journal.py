"""A journal written before the core was cut into stage packages rolls back with today's code:
the journal's format (action kinds and their specs, sealed files) did not move with the
modules (tests/fixtures/journals/before-stages/ABOUT)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "journals" / "before-stages"
PLACE = "/tmp/hpadvise-oldjournal"


def test_a_journal_from_the_flat_layout_rolls_back(tmp_path):
    root = tmp_path / "root"
    j = root / "journal"
    shutil.copytree(OLD, j, ignore=shutil.ignore_patterns("ABOUT"))
    os.chmod(j, 0o700)
    for p in j.rglob("*"):
        os.chmod(p, 0o700 if p.is_dir() else 0o600)
        if p.suffix == ".jsonl":
            p.write_text(p.read_text().replace(PLACE, str(root)))
    # the host as that apply left it
    (root / "sys").mkdir()
    (root / "sys/enabled").write_text("[always] madvise never\n")
    (root / "etc/units.d").mkdir(parents=True)
    (root / "etc/hpadvise.conf").write_text("vm.nr_hugepages = 128\n")
    (root / "etc/units.d/hpadvise.conf").write_text("[Service]\nX=1\n")
    os.symlink("/etc/hpadvise.conf", root / "etc/units.d/link")
    r = subprocess.run([sys.executable, "-m", "hpadvise.cli", "rollback", "--yes",
                        "--journal-dir", str(j)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (root / "sys/enabled").read_text().split() == ["madvise"]  # sysfs takes a word
    assert (root / "etc/hpadvise.conf").read_text() == "vm.nr_hugepages = 0\n"
    assert not (root / "etc/units.d").exists()
    again = subprocess.run([sys.executable, "-m", "hpadvise.cli", "rollback", "--yes",
                            "--journal-dir", str(j)], capture_output=True, text=True, timeout=120)
    assert "nothing to roll back" in again.stdout + again.stderr, again.stdout + again.stderr
