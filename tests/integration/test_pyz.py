"""hpadvise.pyz, the one file a user copies to a host (scripts/build_pyz.py), run with the
host's own Python and nothing installed (`python3 -I`: no user site, this checkout and its
venv out of reach): the same reports as the installed hpadvise, its shipped profiles, manual
pages and engines read from inside the archive, and the live PostgreSQL of this host."""

import json
import os
import subprocess

import pytest

from support import run_cli

pytestmark = pytest.mark.integration
HOST_PYTHON = "/usr/bin/python3"


def host_run(pyz, *args, cache=None, **extra):
    """The archive run as a user runs it; it unpacks itself into `cache` (default: beside
    the archive, not the user's ~/.cache)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH="/usr/sbin:/usr/bin:/sbin:/bin",
               XDG_CACHE_HOME=str(cache or pyz.parent / "cache"), **extra)
    return subprocess.run([HOST_PYTHON, "-I", str(pyz), *args], capture_output=True,
                          text=True, timeout=300, cwd="/", env=env)


def test_the_same_report_as_installed(pyz, hosts):
    if not os.access(HOST_PYTHON, os.X_OK):
        pytest.fail(f"{HOST_PYTHON} not found: the host's own Python runs the archive")
    for tree in ("pg-hugetlb", "zgc-thp", "mthp-always"):
        a = host_run(pyz, "check", "--root", str(hosts / tree), "--format", "json")
        b = run_cli("check", "--root", str(hosts / tree), "--format", "json")
        assert a.returncode == b.returncode, (tree, a.stderr, b.stderr)
        assert json.loads(a.stdout) == json.loads(b.stdout), tree  # the snapshot's time too


def test_what_it_reads_from_inside_the_archive(pyz):
    r = host_run(pyz, "profiles")
    assert r.returncode == 0 and "oltp" in r.stdout and "kvm-host" in r.stdout, r.stderr
    r = host_run(pyz, "engines", "--json")
    assert {e["name"] for e in json.loads(r.stdout)} >= {"postgres", "mysql", "jvm", "redis"}
    r = host_run(pyz, "--version")
    assert r.stdout.strip() == run_cli("--version").stdout.strip()
    r = host_run(pyz, "man", "apply")
    assert r.returncode == 0 and "EXIT STATUS" in r.stdout


def test_it_unpacks_once_into_a_private_cache(pyz, tmp_path):
    """Python keeps no bytecode of what it imports from a zip: the archive unpacks itself
    once per user (its build id names the directory) and runs from there, where the bytecode
    stays; a cache others may write is not used, and HPADVISE_PYZ_CACHE=off runs from the
    archive itself."""
    cache = tmp_path / "mine"
    r = host_run(pyz, "--version", cache=cache)
    assert r.returncode == 0, r.stderr
    [d] = (cache / "hpadvise").iterdir()
    assert d.name.startswith("pyz-") and d.stat().st_mode & 0o777 == 0o700
    assert (cache / "hpadvise").stat().st_mode & 0o077 == 0
    r = host_run(pyz, "profiles", cache=cache)
    assert r.returncode == 0 and "oltp" in r.stdout, r.stderr
    assert list((cache / "hpadvise").iterdir()) == [d]  # unpacked once
    assert list((d / "hpadvise" / "cli").glob("__pycache__/*.pyc"))  # the bytecode kept
    shared = tmp_path / "shared"
    (shared / "hpadvise").mkdir(parents=True)
    (shared / "hpadvise").chmod(0o777)
    r = host_run(pyz, "--version", cache=shared)
    assert r.returncode == 0 and list((shared / "hpadvise").iterdir()) == [], r.stderr
    r = host_run(pyz, "--version", cache=tmp_path / "none", HPADVISE_PYZ_CACHE="off")
    assert r.returncode == 0 and not (tmp_path / "none").exists(), r.stderr


def test_size_and_a_dry_run_apply_on_this_host(pyz):
    a = host_run(pyz, "size", "postgres", "shared_buffers=1GB", "--json")
    b = run_cli("size", "postgres", "shared_buffers=1GB", "--json")
    assert a.returncode == b.returncode == 0, a.stderr
    assert json.loads(a.stdout)["pools"] == json.loads(b.stdout)["pools"]
    r = host_run(pyz, "check", "--db", "postgres", "--format", "json")
    assert r.returncode in (0, 2), r.stderr
    ids = {i["id"] for i in json.loads(r.stdout)["instances"]}
    assert any(i.startswith("postgres:") for i in ids), ids  # the system's own cluster
    r = host_run(pyz, "apply", "--db", "postgres", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["dry_run"] is True
