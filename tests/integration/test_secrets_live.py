"""Secrets planted where database hosts keep them never come out of hpadvise: a MariaDB option
file with a `[client] password`, a JVM with a password property on its command line and
PGPASSWORD in its environment, a DSN with a password. Every output is searched: tables, JSON,
Prometheus, k8s YAML, an apply's printed plan and script, its journal, the snapshot tree (with
and without environments), and the files' modes."""

import json
import os
import stat
from pathlib import Path

import pytest

from support import run_cli

pytestmark = pytest.mark.integration

SECRETS = {"cnf": "CnfSecret7781", "prop": "PropSecret5512", "env": "EnvSecret9903",
           "dsn": "DsnSecret4417"}


def _everything(d: Path) -> bytes:
    out = b""
    for dirpath, _, files in os.walk(d):
        for f in files:
            out += (Path(dirpath) / f).read_bytes()
    return out


def _clean(text, where):
    leaked = [k for k, s in SECRETS.items() if s in (text if isinstance(text, str)
                                                     else text.decode("utf-8", "replace"))]
    assert not leaked, f"{where} leaks {leaked}"


def test_planted_secrets_never_come_out(my_factory, java, knobs, tmp_path):
    m = my_factory()
    with open(m.cnf, "a") as f:
        f.write(f"[client]\nuser = root\npassword = {SECRETS['cnf']}\n")
    m.start()
    j = java("-XX:+UseLargePages", "-Xms256m", "-Xmx256m", f"-Ddb.password={SECRETS['prop']}",
             env={"PGPASSWORD": SECRETS["env"]})
    assert SECRETS["prop"] in Path(f"/proc/{j.pid}/cmdline").read_text()  # planted for real
    dsn = f"mysql://root:{SECRETS['dsn']}@127.0.0.1:{m.port}/"
    outputs = {}
    for name, args in {
        "table": ["check", "-v"],
        "json": ["check", "--json"],
        "prometheus": ["check", "--format", "prometheus"],
        "dsn table": ["check", "--db", "mysql", "--dsn", dsn],
        "dsn json": ["check", "--db", "mysql", "--json", "--dsn", dsn],
        "k8s": ["k8s", "--db", "jvm,mysql"],
        "apply plan": ["apply", "--db", "mysql", "--instance", m.datadir, "--dry-run"],
        "apply json": ["apply", "--db", "mysql", "--instance", m.datadir, "--dry-run",
                       "--json"],
        "apply script": ["apply", "--db", "mysql", "--instance", m.datadir,
                         "--print-script"],
    }.items():
        r = run_cli(*args, timeout=120)
        outputs[name] = r.stdout + r.stderr
        _clean(outputs[name], name)
    # the JVM was seen, with its flags (so its command line was read)
    report = json.loads(run_cli("check", "--db", "jvm", "--json").stdout)
    assert any(i["pid"] == j.pid for i in report["instances"])

    # snapshots: private, redacted, environments only when asked and then redacted
    for flag in ((), ("--with-environ",)):
        snap = tmp_path / f"snap{len(flag)}"
        r = run_cli("snapshot", *flag, str(snap))
        assert r.returncode == 0, r.stderr
        data = _everything(snap)
        _clean(data, f"snapshot {flag}")
        assert b"password = ***" in data  # the option file is there, redacted
        # the JVM's command line is kept, the property's value replaced
        assert b"-Ddb.password=***" in (snap / f"proc/{j.pid}/cmdline").read_bytes()
        env = snap / f"proc/{j.pid}/environ"
        assert env.exists() == bool(flag)
        if flag:
            assert b"PGPASSWORD=***" in env.read_bytes()
        for dirpath, dirs, files in os.walk(snap):
            assert stat.S_IMODE(os.stat(dirpath).st_mode) == 0o700, dirpath
            for f in files:
                assert stat.S_IMODE(os.stat(Path(dirpath) / f).st_mode) == 0o600

    # an apply that edits the option file: the journal records hold no secret, the sealed
    # copy of the file is root's only, and rollback puts the file back byte for byte
    cnf_before = Path(m.cnf).read_bytes()
    jdir = tmp_path / "journal"
    (tmp_path / "root").mkdir()
    r = run_cli("apply", "--db", "mysql", "--instance", m.datadir, "--yes", "--json",
                "--journal-dir", str(jdir), "--persist-root", str(tmp_path / "root"))
    assert r.returncode == 0, r.stdout + r.stderr
    _clean(r.stdout + r.stderr, "apply")
    records = b"".join(p.read_bytes() for p in jdir.glob("*.jsonl"))
    assert records
    _clean(records, "journal records")
    sealed = list(jdir.glob("*.sealed/*"))
    assert sealed and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in sealed)
    hist = run_cli("history", "--journal-dir", str(jdir))
    _clean(hist.stdout + hist.stderr, "history")
    r = run_cli("rollback", "--yes", "--journal-dir", str(jdir))
    assert r.returncode == 0, r.stdout + r.stderr
    _clean(r.stdout + r.stderr, "rollback")
    assert Path(m.cnf).read_bytes() == cnf_before
