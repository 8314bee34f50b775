"""Every command as an unprivileged user (`nobody`): no traceback; what it could not read is
said; `apply --print-script` plans from what it can read, says what it assumed, and its script
checks what the kernel granted."""

import os
import tempfile

import pytest

from support import run_cli

pytestmark = pytest.mark.integration


@pytest.fixture
def nobody_dir():
    if os.geteuid() != 0:
        pytest.skip("needs root to run commands as nobody")
    d = tempfile.mkdtemp(prefix="hpadvise-nobody-")
    os.chmod(d, 0o1777)
    yield d
    import shutil
    shutil.rmtree(d, ignore_errors=True)


def test_every_command_as_nobody(pg_factory, nobody_dir):
    c = pg_factory({"shared_buffers": "64MB", "huge_pages": "try"})
    c.start()
    port = c.datadir  # as nobody the port is unknown: the data directory names it
    runs = {
        # the cluster cannot be sized as nobody: the report is made, and exit 2 says so
        "check": (["check"], 2),
        "check json": (["check", "--json"], 2),
        "check prometheus": (["check", "--format", "prometheus"], 2),
        "engines": (["engines"], 0),
        "profiles": (["profiles"], 0),
        "version": (["--version"], 0),
        "k8s": (["k8s", "--db", "postgres", "--instance", port], 2),  # cannot size it
        "snapshot": (["snapshot", f"{nobody_dir}/snap"], 0),
        # its configuration is in its data directory, which nobody cannot read: it says so
        "dry-run": (["apply", "--db", "postgres", "--instance", port, "--dry-run"], 2),
        "script": (["apply", "--db", "postgres", "--instance", port, "--print-script"], 2),
        "apply": (["apply", "--db", "postgres", "--instance", port, "--yes"], 2),
        "rollback": (["rollback", "--yes"], 2),
        "validate": (["validate", "--duration", "10s"], 2),
    }
    out = {}
    for name, (args, code) in runs.items():
        r = run_cli(*args, user="nobody", timeout=120)
        out[name] = r
        assert "Traceback" not in r.stderr, (name, r.stderr[-1500:])
        assert r.returncode == code, (name, r.returncode, r.stderr[-500:])
        if code == 2:
            lines = r.stderr.strip().splitlines()
            assert lines and all("root" in ln or "sudo" in ln for ln in lines), (name, r.stderr)
            assert name.startswith("check") or len(lines) == 1, (name, r.stderr)
    # it says what it could not read, and which cluster is left out of the plan
    assert "run as root" in out["check"].stdout
    assert f"postgres:{c.datadir}: cannot size it as this user" in out["check"].stderr
    assert "not in the plan" in out["check"].stdout
    assert "cannot size" in out["script"].stderr and out["script"].stdout == ""
    # history and rollback --dry-run on a journal nobody may not read: one clear line
    jdir = f"{nobody_dir}/journal"
    os.makedirs(jdir, mode=0o700)
    for args in (["history", "--journal-dir", jdir],
                 ["rollback", "--dry-run", "--journal-dir", jdir]):
        r = run_cli(*args, user="nobody")
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "permission denied" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # the default journal directory, which nobody cannot create: the same
    r = run_cli("history", user="nobody")
    assert "Traceback" not in r.stderr and r.returncode in (0, 2), r.stderr
