"""What hpadvise writes and reads back when handed the wrong files: a device node, a FIFO, a
link, an empty path, an edited or cut journal. One line, the right exit code, and every
file, device and knob as it was."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support import THP, host_state, run_cli

pytestmark = pytest.mark.integration


def test_output_never_replaces_a_device_a_fifo_or_a_link(tmp_path):
    """A device node made with mknod, a FIFO and a link: --output refuses each before any
    work, and each stays what it was (the atomic replace renamed a file over /dev/null)."""
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    dev = tmp_path / "null"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = tmp_path / "target"
    target.write_text("mine\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    for path, words in ((dev, "character device"), (fifo, "a FIFO"),
                        (link, "symbolic link")):
        for args in (["check", "--output", str(path)],
                     ["check", "--json", "--output", str(path)],
                     ["history", "--json", "--output", str(path)],
                     ["apply", "--db", "postgres", "--json", "--output", str(path), "--yes"]):
            r = run_cli(*args)
            assert r.returncode == 2 and words in r.stderr, (args, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == "", args
    assert stat.S_ISCHR(dev.stat().st_mode) and os.major(dev.stat().st_rdev) == 1
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert link.is_symlink() and target.read_text() == "mine\n"
    for d in ("/dev/null", "/dev/full"):
        assert stat.S_ISCHR(os.stat(d).st_mode)


def test_snapshot_into_an_empty_path_touches_nothing(tmp_path):
    """`snapshot ''` wrote 420 files into the current directory and chmod'ed it 0700."""
    (tmp_path / "mine").write_text("x")
    os.chmod(tmp_path, 0o755)
    before = (sorted(os.listdir(tmp_path)), stat.S_IMODE(tmp_path.stat().st_mode))
    r = subprocess.run([sys.executable, "-m", "hpadvise.cli", "snapshot", ""],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "empty path" in r.stderr, r.stderr
    assert (sorted(os.listdir(tmp_path)), stat.S_IMODE(tmp_path.stat().st_mode)) == before
    # a directory that holds files is refused too; an empty one keeps its own mode
    r = run_cli("snapshot", str(tmp_path))
    assert r.returncode == 2 and "not an empty directory" in r.stderr
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o750)
    os.chmod(empty, 0o750)
    assert run_cli("snapshot", str(empty)).returncode == 0
    assert stat.S_IMODE(empty.stat().st_mode) == 0o750 and (empty / "proc").is_dir()


@pytest.fixture
def applied(pg_factory, knobs, tmp_path):
    """An apply without restart on a throwaway cluster (pool, THP, a persisted file and
    huge_pages): its journal, and the host as it was before."""
    knobs.set(f"{THP}/enabled", "always")
    c = pg_factory({"shared_buffers": "64MB", "huge_pages": "try"})
    c.start()
    j, p = tmp_path / "journal", tmp_path / "root"
    p.mkdir()
    before = host_state(c, p)
    r = run_cli("apply", "--db", "postgres", "--instance", c.datadir, "--yes",
                "--journal-dir", str(j), "--persist-root", str(p))
    assert r.returncode == 0, r.stderr
    [path] = j.glob("*.jsonl")
    return c, j, p, path, before


def test_edited_journal_is_refused_whole(applied):
    """An old value no action can take ("old": "zero" for a pool): one line, exit 2, nothing
    restored; once mended, rollback restores everything."""
    c, j, p, path, before = applied
    text = path.read_text()
    lines = text.splitlines()
    n = next(i for i, ln in enumerate(lines) if '"kind": "pool"' in ln)
    rec = json.loads(lines[n])
    rec["old"] = "zero"
    lines[n] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")
    during = host_state(c, p)
    r = run_cli("rollback", "--yes", "--journal-dir", str(j))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "'zero' is not a page count" in r.stderr and "nothing was restored" in r.stderr
    assert "Traceback" not in r.stderr and host_state(c, p) == during
    path.write_text(text)
    r = run_cli("rollback", "--yes", "--journal-dir", str(j))
    assert r.returncode == 0, r.stderr
    assert host_state(c, p) == before


def test_journal_cut_mid_line(applied):
    """A journal cut in the middle of a record: rollback restores what it records, says that
    the rest is lost, exits 1; history then says rolled back."""
    c, j, p, path, before = applied
    data = path.read_bytes()
    cut = data.rfind(b'"type": "intent"') + 30  # inside the last change's intent
    path.write_bytes(data[:cut])
    r = run_cli("rollback", "--yes", "--journal-dir", str(j))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "torn record" in r.stdout and "torn record" in r.stderr
    [h] = json.loads(run_cli("history", "--json", "--journal-dir", str(j)).stdout)
    assert h["rolled_back"] is not None
    # the last change (huge_pages) was lost with the cut: it is the one thing not undone
    lost = f"{c.datadir}/postgresql.auto.conf"
    after = host_state(c, p)
    assert {k for k in before if before[k] != after[k]} == {lost}
    Path(lost).write_bytes(before[lost])
