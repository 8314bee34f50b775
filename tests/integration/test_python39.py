"""hpadvise on Python 3.9, the python3 of Debian 11, RHEL 9 and Amazon Linux 2023: in the
Debian bullseye root (scripts/roots.sh), with only that root's own Python 3.9.2 and the
one-file hpadvise.pyz (scripts/build_pyz.py), nothing installed.

- The unit tests run there, against the archive (PYTHONPATH=hpadvise.pyz), with the root's
  venv of the tests' own tools (pytest and the rest; nothing of hpadvise's).
- README's install and build of the archive (`scripts/install.sh`, then `.venv/bin/python
  scripts/build_pyz.py`) work as written on each older Python the project supports, in the
  roots that have it: 3.9 (bullseye), 3.10 (Ubuntu's jammy) and 3.13 (trixie); the archive
  built there runs `check` there.
- `python3 hpadvise.pyz check`, `size`, `apply --dry-run` and `report` run inside the
  namespaces of a PostgreSQL 13 server of that root (tests/roots.py), as on a bullseye host:
  check reports the server as it is (version, port, settings) and sizes its shared memory
  as the server mapped it, the same pages the installed hpadvise plans for it from the host."""

from __future__ import annotations

import json
import math
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import hostlock
from roots import NoRoot, pg13, root_path, why_no_root
from support import REPO, run_cli

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bullseye() -> Path:
    root = root_path("bullseye")
    if root is None:
        pytest.skip(why_no_root("bullseye"))
    if not (root / "opt/hpadvise-tests/bin/python").exists():
        pytest.skip(f"{root} has no venv of the unit tests' tools: rebuild it "
                    "(rm -r it; scripts/roots.sh build bullseye)")
    return root


def test_the_unit_tests_pass_on_python_39(bullseye, pyz, tmp_path):
    """The checkout bound read-only at /mnt and a fresh /tmp holding the archive, in private
    mount and PID namespaces (nothing stays mounted, no process outlives the run)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    shutil.copy(pyz, tmp / "hpadvise.pyz")
    r_, src = shlex.quote(str(bullseye)), shlex.quote(str(REPO))
    inner = shlex.join([
        "chroot", str(bullseye), "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/tmp", "LC_ALL=C.UTF-8", "PYTHONPATH=/tmp/hpadvise.pyz",
        "PYTHONDONTWRITEBYTECODE=1", f"{hostlock.BESIDE}=1", "sh", "-c",
        "cd /mnt && exec /opt/hpadvise-tests/bin/python -m pytest -p no:cacheprovider "
        "-o addopts= tests/unit"])
    script = "\n".join([
        "set -e",
        f"mount -t proc proc {r_}/proc",
        f"mount --rbind /dev {r_}/dev",
        f"mount --rbind /sys {r_}/sys",
        f"mount --bind {src} {r_}/mnt",
        f"mount -o remount,bind,ro {r_}/mnt",
        f"mount --bind {shlex.quote(str(tmp))} {r_}/tmp",
        inner])
    r = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--propagation", "private",
                        "--kill-child", "sh", "-c", script],
                       capture_output=True, text=True, timeout=900)
    summary = (r.stdout.strip().splitlines() or [""])[-1]
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Python 3.9.2" in r.stdout and " passed" in summary, summary
    assert "failed" not in summary and "error" not in summary, summary


# Each root's python3: (suite, version, CPython ABI tag)
PYTHONS = [("bullseye", "3.9"), ("jammy", "3.10"), ("trixie", "3.13")]


def _wheels(py: str, into: Path) -> None:
    """What README's install fetches for that Python (the dependencies pyproject.toml names,
    and its build backend), fetched by scripts/roots.sh as it fetches the unit tests' tools:
    the roots have no index of their own."""
    import tomllib
    proj = tomllib.loads((REPO / "pyproject.toml").read_text())
    specs = [d.split(";")[0].strip() for d in proj["project"]["dependencies"]] \
        + proj["build-system"]["requires"]
    r = subprocess.run([str(REPO / "scripts" / "roots.sh"), "wheels", py, str(into), *specs],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"fetching the wheels for Python {py}: {r.stderr[-1500:]}"


@pytest.mark.parametrize("suite,py", PYTHONS, ids=[p[0] for p in PYTHONS])
def test_the_archive_is_built_as_readme_says(suite, py, tmp_path):
    """A copy of the checkout (its committed files) and the wheels in a fresh /tmp of the
    root, in private mount and PID namespaces; pip told where the wheels are (PIP_NO_INDEX,
    PIP_FIND_LINKS), nothing else changed in README's two commands."""
    root = root_path(suite)
    if root is None:
        pytest.skip(why_no_root(suite))
    if not (root / "usr/lib" / f"python{py}" / "venv").is_dir():
        pytest.skip(f"{root} has no python{py} venv module: rebuild it "
                    f"(scripts/roots.sh build {suite})")
    tmp = tmp_path / "tmp"
    (tmp / "src").mkdir(parents=True)
    tmp.chmod(0o1777)
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                           check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if (REPO / f).is_file():
            (tmp / "src" / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, tmp / "src" / f)
    _wheels(py, tmp / "wheels")
    steps = ("cd /tmp/src && export PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wheels && "
             "scripts/install.sh && .venv/bin/python scripts/build_pyz.py /tmp/hpadvise.pyz "
             "&& python3 --version && python3 /tmp/hpadvise.pyz check --json > /tmp/check.json")
    inner = shlex.join(["chroot", str(root), "/usr/bin/env", "-i",
                        "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp", "LC_ALL=C.UTF-8",
                        "bash", "-c", steps])
    r_ = shlex.quote(str(root))
    script = "\n".join(["set -e", f"mount -t proc proc {r_}/proc",
                        f"mount --bind {shlex.quote(str(tmp))} {r_}/tmp", inner])
    r = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--propagation", "private",
                        "--kill-child", "sh", "-c", script],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"Python {py}." in r.stdout, r.stdout
    report = json.loads((tmp / "check.json").read_text())
    assert report["hpadvise_version"] == metadata.version("hpadvise"), report["hpadvise_version"]
    assert report["errors"] == [] and report["host"], report.get("errors")


def shared_mapping_kb(pid: int) -> int:
    """The postmaster's main shared memory as the kernel mapped it: the largest shared
    anonymous mapping (PostgreSQL's mmap of MAP_SHARED|MAP_ANONYMOUS, '/dev/zero (deleted)'
    in maps, or its huge page mapping '/anon_hugepage (deleted)')."""
    best = 0
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        f = line.split()
        if len(f) >= 6 and f[1][3] == "s" and f[5] in ("/dev/zero", "/anon_hugepage"):
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            best = max(best, (hi - lo) // 1024)
    return best


def test_the_archive_on_bullseye_reports_its_postgresql(bullseye, pyz):
    try:
        srv = pg13({"shared_buffers": "256MB", "max_connections": "50", "huge_pages": "try"})
    except NoRoot as exc:
        pytest.skip(str(exc))
    try:
        srv.start()
        archive = Path(srv.tmp, "tmp", "hpadvise.pyz")  # the namespace's /tmp
        shutil.copy(pyz, archive)
        archive.chmod(0o644)

        def hpadvise(*args):
            return srv.exec(["python3", "-I", "/tmp/hpadvise.pyz", *args], timeout=300)
        r = srv.exec(["python3", "--version"])
        assert r.stdout.strip() == "Python 3.9.2", r.stdout + r.stderr
        r = hpadvise("check", "--db", "postgres", "--format", "json")
        assert r.returncode == 0, r.stderr[-2000:]
        d = json.loads(r.stdout)
        assert d["errors"] == [], d["errors"]
        [inst] = [i for i in d["instances"] if i["engine"] == "postgres"]
        version = srv.sql("SHOW server_version").strip()
        assert version.startswith("13.") and inst["version"].startswith(version), inst["version"]
        assert inst["settings"]["port"] == srv.port and inst["owner"] == "postgres"
        assert inst["settings"]["shared_buffers"] in ("256MB", "262144kB", "32768"), \
            inst["settings"]
        assert inst["settings"]["huge_pages"] == "try"
        # its shared memory as the server mapped it, in 2 MiB pages
        kb = shared_mapping_kb(srv.pid)
        assert kb > 256 * 1024
        pages = inst["demand"]["pages"]["2048"]
        assert pages == math.ceil(kb / 2048), (pages, kb, inst["demand"])
        # the installed hpadvise, from the host, plans the same pages for it
        host = json.loads(run_cli("check", "--db", "postgres", "--format", "json").stdout)
        seen = [i for i in host["instances"] if i.get("pid") == srv.pid]
        assert seen and seen[0]["demand"]["pages"] == inst["demand"]["pages"], seen
        assert seen[0]["version"] == inst["version"]
        # the commands that change nothing
        r = hpadvise("apply", "--db", "postgres", "--dry-run", "--json")
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout)["dry_run"] is True
        r = hpadvise("size", "postgres", "shared_buffers=256MB", "max_connections=50",
                     "--json")
        assert r.returncode in (0, 1), r.stderr[-2000:]  # 1: the host cannot hold it
        assert json.loads(r.stdout)["pools"], r.stdout
        r = hpadvise("check", "--db", "postgres", "--json", "--output", "/tmp/h.json")
        assert r.returncode == 0, r.stderr[-2000:]
        r = hpadvise("report", "/tmp/h.json", "--json")
        assert r.returncode == 0, r.stderr[-2000:]
        [row] = json.loads(r.stdout)
        assert row["running"] >= 1
    finally:
        srv.destroy()
