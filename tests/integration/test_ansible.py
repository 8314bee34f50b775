"""The Ansible collection over real SSH: a throwaway sshd on 127.0.0.1 with a throwaway key,
ansible-playbook from the test venv, the collection from the repository. Check mode changes
nothing (every knob and file compared); apply puts a throwaway PostgreSQL on huge pages; the
second run reports changed=0; rollback restores everything; the audit playbook's reports feed
`hpadvise report`."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import check_json, free_port, host_state, instance, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def sshd(tmp_path):
    if not os.path.exists("/usr/sbin/sshd"):
        pytest.fail("sshd not found: run scripts/test.sh, which installs openssh-server")
    if not (BIN / "ansible-playbook").exists():
        pytest.fail("ansible-playbook not in the test venv: run scripts/test.sh")
    d = tmp_path / "ssh"
    d.mkdir(mode=0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)],
                       check=True)
    shutil.copy(d / "client.pub", d / "authorized_keys")
    os.chmod(d / "authorized_keys", 0o600)
    port = free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host\nAuthorizedKeysFile "
        f"{d}/authorized_keys\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        f"KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile {d}/sshd.pid\n"
        "Subsystem sftp internal-sftp\n")
    made_run = not os.path.isdir("/run/sshd")  # privilege separation directory
    if made_run:
        os.makedirs("/run/sshd", mode=0o755)
    p = subprocess.Popen(["/usr/sbin/sshd", "-D", "-f", str(d / "sshd_config"), "-E",
                          str(d / "sshd.log")])
    try:
        for _ in range(100):
            r = subprocess.run(["ssh", "-i", str(d / "client"), "-p", str(port), "-o",
                                "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                                "-o", "BatchMode=yes", "root@127.0.0.1", "true"],
                               capture_output=True)
            if r.returncode == 0:
                break
            time.sleep(0.1)
        else:
            pytest.fail("sshd did not come up: " + (d / "sshd.log").read_text()[-500:])
        inv = tmp_path / "inventory"
        inv.write_text(
            f"db1 ansible_host=127.0.0.1 ansible_port={port} ansible_user=root "
            f"ansible_ssh_private_key_file={d}/client ansible_python_interpreter=/usr/bin/python3 "
            "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'"
            f"\n[all:vars]\nhpadvise_executable={BIN}/hpadvise\n")
        yield inv
    finally:
        # sessions are children of the listener: end them first, then the listener, and reap
        kids = [int(x) for x in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                                               text=True).stdout.split()]
        for k in kids:
            try:
                os.kill(k, signal.SIGTERM)
            except ProcessLookupError:
                pass
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
        if made_run:
            shutil.rmtree("/run/sshd", ignore_errors=True)


def playbook(inv, name, *args):
    # no persistent SSH master (it would outlive the test), nothing under ~/.ansible
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections"),
           "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_HOME": str(inv.parent / "ansible-home"),
           "ANSIBLE_LOCAL_TEMP": str(inv.parent / "ansible-local"),
           "ANSIBLE_REMOTE_TEMP": str(inv.parent / "ansible-remote"),
           "ANSIBLE_SSH_ARGS": "-o ControlMaster=no", "ANSIBLE_RETRY_FILES_ENABLED": "0"}
    r = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv),
                        f"hpadvise.hugepages.{name}", *args], capture_output=True, text=True,
                       env=env, timeout=600, cwd=inv.parent)
    recap = re.search(r"db1\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)",
                      r.stdout)
    assert recap, r.stdout[-3000:] + r.stderr[-2000:]
    return r, {k: int(v) for k, v in zip(("ok", "changed", "unreachable", "failed"),
                                         recap.groups())}


def test_audit_check_mode_apply_idempotent_rollback(sshd, knobs, pg_factory, tmp_path):
    c = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    c.start()
    inv = sshd
    jdir = tmp_path / "journal"
    common = ["-e", "hpadvise_db=postgres", "-e", f"hpadvise_instance={c.port}",
              "-e", f"hpadvise_journal_dir={jdir}", "-e", "hpadvise_restart=true"]
    # audit: reports on the controller, read by `hpadvise report`; the host is not touched
    before = host_state(c, "/etc/sysctl.d")
    r, recap = playbook(inv, "audit", "-e", f"reports={tmp_path}/reports")
    assert recap["failed"] == 0, r.stdout[-2000:]
    assert re.search(r"TASK \[Check \(changes nothing\)\][^\n]*\n+ok: \[db1\]", r.stdout)
    assert host_state(c, "/etc/sysctl.d") == before
    rep = json.loads((tmp_path / "reports/db1.json").read_text())
    instance(rep, c.datadir)
    rows = json.loads(run_cli("report", str(tmp_path / "reports"), "--json").stdout)
    assert len(rows) == 1 and any(str(c.port) in i for i in rows[0]["instances"])

    r, recap = playbook(inv, "apply", "--check", "--diff", *common)
    assert recap["failed"] == 0 and recap["changed"] == 1, r.stdout[-3000:]
    assert "hpadvise plan" in r.stdout and "nr_hugepages" in r.stdout  # the diff
    assert host_state(c, "/etc/sysctl.d") == before  # check mode changed nothing
    assert not jdir.exists() or not list(jdir.glob("*.jsonl"))

    rolled = False
    try:
        r, recap = playbook(inv, "apply", "--diff", *common)
        assert recap["failed"] == 0 and recap["changed"] == 1, r.stdout[-3000:]
        report, _ = check_json("--db", "postgres")
        assert instance(report, c.datadir)["backing"] == "hugetlb"
        r, recap = playbook(inv, "apply", "--diff", *common)  # a change would show its diff
        assert recap["failed"] == 0 and recap["changed"] == 0, r.stdout[-3000:]

        r, recap = playbook(inv, "apply", "-e", "hpadvise_state=rolled_back", *common)
        rolled = recap["failed"] == 0
        assert rolled and recap["changed"] == 1, r.stdout[-3000:]
    finally:
        if not rolled:  # whatever failed, the applies' files do not outlive the test
            run_cli("rollback", "--yes", "--journal-dir", str(jdir))
    report, _ = check_json("--db", "postgres")
    assert instance(report, c.datadir)["backing"] == "4k"
    assert host_state(c, "/etc/sysctl.d") == before


@pytest.mark.parametrize("module", ["check", "apply", "rollback"])
def test_module_documentation_parses(module, tmp_path):
    """ansible-doc reads each module's documentation (with the shared fragment)."""
    if not (BIN / "ansible-doc").exists():
        pytest.fail("ansible-doc not in the test venv: run scripts/test.sh")
    r = subprocess.run([str(BIN / "ansible-doc"), "--json", f"hpadvise.hugepages.{module}"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections"),
                            "ANSIBLE_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)[f"hpadvise.hugepages.{module}"]["doc"]
    assert "executable" in doc["options"]  # from the fragment
    if module != "rollback":  # the plan's profile, from the named fragment
        assert doc["options"]["profile"]["default"] == "oltp"


def test_collection_passes_ansible_test_sanity(tmp_path):
    """ansible-test's sanity tests that run without containers, all of them (validate-modules,
    the checker of module documentation, arguments and return values; pylint, pep8, import,
    compile, yamllint, ansible-doc, changelog, runtime-metadata ...), on a copy of the
    collection, with the test venv's Python (`ansible-test sanity --python X.Y`). The GPLv3
    header check is ignored (tests/sanity/ignore-*.txt): the collection is Apache-2.0 like
    the rest of hpadvise."""
    coll = REPO / "collections" / "ansible_collections" / "hpadvise" / "hugepages"
    work = tmp_path / "ansible_collections" / "hpadvise" / "hugepages"
    shutil.copytree(coll, work)
    v = f"{sys.version_info.major}.{sys.version_info.minor}"
    r = subprocess.run([str(BIN / "ansible-test"), "sanity", "--python", v], cwd=work,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
