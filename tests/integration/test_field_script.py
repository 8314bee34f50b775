"""scripts/field.sh on this host, as a newcomer runs it: hpadvise installed from a wheel built
from the checkout, a cluster it starts, check, apply and rollback, a summary; the host as it
was afterwards, and nothing of the run left behind."""

import os
import subprocess
import pytest

from support import REPO, host_state

pytestmark = [pytest.mark.integration, pytest.mark.live]


def test_field_script_from_a_wheel(knobs, tmp_path):
    before = host_state()
    left = {f for f in os.listdir("/tmp") if f.startswith("hpadvise-field-")}
    root = tmp_path / "root"  # the persistent files under a test root, not the host's /etc
    root.mkdir()
    r = subprocess.run([str(REPO / "scripts/field.sh"), "--buffers", "256MB", "--out",
                        str(tmp_path), "check", "apply", "rollback"],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "APPLY_ARGS": f"--persist-root {root}"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = (tmp_path / "summary.md").read_text()
    rows = {ln.split("|")[1].strip(): ln.split("|")[2].strip() for ln in summary.splitlines()
            if ln.startswith("| ") and not ln.startswith("| part")}
    assert rows == {"check": "0", "apply": "0", "rollback": "0"}, summary
    assert "from hpadvise-" in summary and ".whl" in summary  # installed from the wheel
    assert "needs" in summary and "done: restart" in summary and "restored: pool" in summary
    assert host_state() == before
    assert {f for f in os.listdir("/tmp") if f.startswith("hpadvise-field-")} == left
    assert not list(root.iterdir())  # what apply persisted is gone again


def test_field_script_refuses_what_is_not_there(pg_factory, tmp_path):
    """Table row 10 of the capture/replay review: a data directory that is missing or
    stopped, binaries that are not there, an option without its value: one line and exit 2
    each, before anything is installed or started (it used to run Debian's binaries for a
    missing --bindir, and report 'cluster: MISSING (named)' with exit 0)."""
    stopped = pg_factory()
    left = {f for f in os.listdir("/tmp") if f.startswith("hpadvise-field-")}
    cases = [(["--pgdata", str(tmp_path / "MISSING"), "check"], "no PG_VERSION"),
             (["--pgdata", stopped.datadir, "check"], "not running"),
             (["--bindir", "/nonexistent", "check"], "no PostgreSQL binaries"),
             (["--out"], "--out needs a value")]
    for args, said in cases:
        r = subprocess.run([str(REPO / "scripts/field.sh"), *args], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.splitlines()) == 1, \
            (args, r.stdout, r.stderr)
    assert {f for f in os.listdir("/tmp") if f.startswith("hpadvise-field-")} == left
