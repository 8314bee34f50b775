"""A PostgreSQL cluster run by Patroni (3.0.2 with etcd 3.4, Debian's packages), one member on
127.0.0.1: check names the manager (scope, member, role) from its REST API, takes the
settings Patroni puts on the postmaster's command line for no pending restart, and apply
changes nothing behind Patroni's back (no ALTER SYSTEM, no pg_ctl restart): it prints the
patronictl commands. Patroni's passwords never appear in the output. Teardown stops Patroni
(which stops its server) and etcd and removes their data, whatever happens."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import pytest

from support import check_json, free_port, instance, run_cli

pytestmark = pytest.mark.integration
SECRETS = ("s3cret-superuser-pw", "s3cret-replication-pw")


def _wait(url: str, seconds: float, want=lambda d: True) -> dict:
    deadline, last = time.time() + seconds, None
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                d = json.loads(r.read().decode())
                if want(d):
                    return d
                last = d
        except (OSError, ValueError) as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"{url} not ready after {seconds} s: {last}")


@pytest.fixture
def patroni():
    for exe in ("patroni", "etcd"):
        if not shutil.which(exe):
            pytest.fail(f"{exe} not found: scripts/test.sh installs Debian's patroni and "
                        "etcd-server packages")
    tmp = tempfile.mkdtemp(prefix="hpadvise-patroni-")
    os.chmod(tmp, 0o755)
    shutil.chown(tmp, "postgres", "postgres")
    eport, peer, rport, pgport = free_port(), free_port(), free_port(), free_port()
    procs = []
    try:
        procs.append(subprocess.Popen(
            ["etcd", "--name", "hpadvise-test", "--data-dir", f"{tmp}/etcd",
             "--listen-client-urls", f"http://127.0.0.1:{eport}",
             "--advertise-client-urls", f"http://127.0.0.1:{eport}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"hpadvise-test=http://127.0.0.1:{peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        _wait(f"http://127.0.0.1:{eport}/version", 30)
        conf = f"{tmp}/patroni.yml"
        with open(conf, "w") as f:
            f.write(f"""scope: hpadvise-test
name: member1
restapi:
  listen: 127.0.0.1:{rport}
  connect_address: 127.0.0.1:{rport}
etcd3:
  hosts: 127.0.0.1:{eport}
bootstrap:
  dcs:
    ttl: 30
    loop_wait: 2
    postgresql:
      parameters:
        shared_buffers: 64MB
        max_connections: 50
  initdb:
  - encoding: UTF8
postgresql:
  listen: 127.0.0.1:{pgport}
  connect_address: 127.0.0.1:{pgport}
  data_dir: {tmp}/data
  bin_dir: /usr/lib/postgresql/15/bin
  pgpass: {tmp}/pgpass
  authentication:
    superuser:
      username: postgres
      password: {SECRETS[0]}
    replication:
      username: replicator
      password: {SECRETS[1]}
  parameters:
    unix_socket_directories: '{tmp}'
""")
        shutil.chown(conf, "postgres", "postgres")
        os.chmod(conf, 0o600)
        import pwd
        pw = pwd.getpwnam("postgres")
        procs.append(subprocess.Popen(["patroni", conf], cwd=tmp, user=pw.pw_uid,
                                      group=pw.pw_gid, extra_groups=[],
                                      stdout=open(f"{tmp}/patroni.log", "w"),
                                      stderr=subprocess.STDOUT, start_new_session=True))
        _wait(f"http://127.0.0.1:{rport}/patroni", 90, lambda d: d.get("state") == "running")
        yield {"datadir": f"{tmp}/data", "config": conf, "api": rport}
    finally:
        for p in reversed(procs):  # Patroni first: it stops its postmaster on SIGTERM
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=60)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        subprocess.run(["pkill", "-KILL", "-f", f"{tmp}/data"], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def test_check_names_patroni_and_apply_goes_through_it(patroni):
    report, r = check_json("--db", "postgres")
    assert r.returncode == 0, r.stderr
    i = instance(report, patroni["datadir"])
    assert i["settings"]["manager"] == "Patroni (scope hpadvise-test, member member1, primary)"
    codes = {f["code"] for f in report["findings"] if f["instance"] == i["id"]}
    assert "pg.managed" in codes and "pg.pending_restart" not in codes, codes
    assert i["settings"]["max_connections"] == "50"  # Patroni's, from its command line
    r = run_cli("apply", "--db", "postgres", "--instance", patroni["datadir"], "--dry-run",
                "--json", "--restart", "--no-persist")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    mine = [c for c in plan["changes"] if c["instance"] == i["id"]]
    assert not mine, mine  # no ALTER SYSTEM, no pg_ctl restart behind Patroni's back
    [n] = [n for n in plan["notices"] if "managed by Patroni" in n]
    assert f"patronictl -c {patroni['config']} edit-config hpadvise-test -p huge_pages=on" in n
    assert "--role replica" in n and n.index("--role replica") < n.index("--role primary")
    everything = json.dumps(report) + r.stdout + r.stderr
    assert not [s for s in SECRETS if s in everything]
