"""A PostgreSQL cluster run by Patroni (3.0.2 with etcd 3.4, Debian's packages), two members on
127.0.0.1: check names the manager (scope, member, role) from its REST API, takes the
settings Patroni puts on the postmaster's command line for no pending restart, and apply
goes through Patroni (its configuration, its restarts, the replica first), never behind its
back (no ALTER SYSTEM, no pg_ctl). Patroni's passwords never appear in the output. Teardown stops Patroni
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


def _member_conf(tmp: str, name: str, eport: int, rport: int, pgport: int) -> str:
    conf = f"{tmp}/{name}.yml"
    with open(conf, "w") as f:
        f.write(f"""scope: hpadvise-test
name: {name}
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
  data_dir: {tmp}/{name}
  bin_dir: /usr/lib/postgresql/15/bin
  pgpass: {tmp}/{name}.pgpass
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 md5
  - host replication replicator 127.0.0.1/32 md5
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
    return conf


@pytest.fixture
def patroni():
    """etcd and two Patroni members on 127.0.0.1: member1 bootstraps the cluster and leads,
    member2 joins as its streaming replica."""
    for exe in ("patroni", "etcd"):
        if not shutil.which(exe):
            pytest.fail(f"{exe} not found: scripts/test.sh installs Debian's patroni and "
                        "etcd-server packages")
    tmp = tempfile.mkdtemp(prefix="hpadvise-patroni-")
    os.chmod(tmp, 0o755)
    shutil.chown(tmp, "postgres", "postgres")
    eport, peer = free_port(), free_port()
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
        import pwd
        pw = pwd.getpwnam("postgres")
        members = {}
        for name, role in (("member1", "master"), ("member2", "replica")):
            rport, pgport = free_port(), free_port()
            conf = _member_conf(tmp, name, eport, rport, pgport)
            procs.append(subprocess.Popen(["patroni", conf], cwd=tmp, user=pw.pw_uid,
                                          group=pw.pw_gid, extra_groups=[],
                                          stdout=open(f"{tmp}/{name}.log", "w"),
                                          stderr=subprocess.STDOUT, start_new_session=True))
            # Patroni 3.0 still calls the leader "master" in its API
            _wait(f"http://127.0.0.1:{rport}/patroni", 120,
                  lambda d, role=role: d.get("state") == "running" and d.get("role") == role)
            members[name] = {"datadir": f"{tmp}/{name}", "config": conf, "api": rport}
        yield {**members["member1"], "members": members}
    finally:
        for p in reversed(procs):  # Patroni first: it stops its postmaster on SIGTERM
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=60)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        subprocess.run(["pkill", "-KILL", "-f", f"{tmp}/member"], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def _api(patroni, name: str, path: str = "patroni") -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{patroni['members'][name]['api']}/{path}",
                                timeout=5) as r:
        return json.loads(r.read().decode())


def test_check_names_patroni_and_apply_goes_through_it(patroni, knobs, tmp_path):
    """Two members: check names the manager and each member's role; apply sets huge_pages
    in Patroni's configuration once and has Patroni restart the replica, then the leader,
    each verified on huge pages; the leader stays leader on the same timeline; rollback
    restores the configuration and both members the same way."""
    m1, m2 = patroni["members"]["member1"], patroni["members"]["member2"]
    knobs.pool(2048, 0)
    report, r = check_json("--db", "postgres")
    assert r.returncode == 0, r.stderr
    i1, i2 = instance(report, m1["datadir"]), instance(report, m2["datadir"])
    assert i1["settings"]["manager"] == "Patroni (scope hpadvise-test, member member1, primary)"
    assert i2["settings"]["manager"] == "Patroni (scope hpadvise-test, member member2, replica)"
    codes = {f["code"] for f in report["findings"] if f["instance"] == i1["id"]}
    assert "pg.managed" in codes and "pg.pending_restart" not in codes, codes
    assert i1["settings"]["max_connections"] == "50"  # Patroni's, from its command line
    assert i1["settings"]["sources"]["max_connections"] == "command line (Patroni)"
    assert i1["backing"] == i2["backing"] == "4k"
    timeline = _api(patroni, "member1")["timeline"]
    j, root = tmp_path / "journal", tmp_path / "root"
    root.mkdir()
    both = ["--instance", m1["datadir"], "--instance", m2["datadir"]]
    common = ["apply", "--db", "postgres", *both, "--restart", "--journal-dir", str(j),
              "--persist-root", str(root)]

    r = run_cli(*common, "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    kinds = [(c["kind"], c.get("instance")) for c in json.loads(r.stdout)["changes"]
             if c["kind"].startswith(("pg_", "patroni_"))]
    assert [k for k, _ in kinds] == ["patroni_params", "patroni_restart", "patroni_restart"] \
        and [i for _, i in kinds[1:]] == [i2["id"], i1["id"]], kinds  # once; the replica first
    r = run_cli(*common, "--print-script")
    assert r.returncode == 0, r.stderr
    script = r.stdout
    assert "patronictl -c " in script and "edit-config hpadvise-test -p huge_pages=on" in script
    assert script.index("restart hpadvise-test member2") < \
        script.index("restart hpadvise-test member1")
    assert "ALTER SYSTEM" not in script and "pg_ctl" not in script

    r = run_cli(*common, "--yes", "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    out = json.loads(r.stdout)
    assert out["status"] == "ok", out
    assert _api(patroni, "member1", "config")["postgresql"]["parameters"]["huge_pages"] == "on"
    report, _ = check_json("--db", "postgres")
    assert {instance(report, m["datadir"])["backing"] for m in (m1, m2)} == {"hugetlb"}
    leader = _api(patroni, "member1")
    assert leader["role"] == "master" and leader["timeline"] == timeline  # no failover
    assert _api(patroni, "member2")["role"] == "replica"

    r = run_cli("rollback", "--yes", "--journal-dir", str(j))
    assert r.returncode == 0, r.stderr + r.stdout
    assert "huge_pages" not in _api(patroni, "member1", "config")["postgresql"]["parameters"]
    report, _ = check_json("--db", "postgres")
    assert {instance(report, m["datadir"])["backing"] for m in (m1, m2)} == {"4k"}
    leader = _api(patroni, "member1")
    assert leader["role"] == "master" and leader["timeline"] == timeline
    everything = json.dumps(report) + script + json.dumps(out) + r.stdout + r.stderr
    assert not [s for s in SECRETS if s in everything]
