"""A PostgreSQL cluster run by Patroni (3.0 with etcd 3.4, Debian's packages) on 127.0.0.1, for
the Patroni tests and the field's Patroni cell: `cluster()` yields the leader's (and every
member's) data directory, configuration file, REST port and PostgreSQL port, and stops
Patroni (which stops its server) and etcd and removes their data afterwards, whatever
happens."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from support import free_port

SECRETS = ("s3cret-superuser-pw", "s3cret-replication-pw")


def tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def wait_json(url: str, seconds: float, want=lambda d: True, proc=None, log: str = "") -> dict:
    """The JSON `url` answers once `want` takes it; fails at once, with the tail of `log`, where
    `proc` (the server behind it) has exited, and after `seconds` otherwise."""
    deadline, last = time.time() + seconds, None
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{url}: its server exited with {proc.returncode}; "
                                 f"its log ends:\n{tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                d = json.loads(r.read().decode())
                if want(d):
                    return d
                last = d
        except (OSError, ValueError) as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"{url} not ready after {seconds} s: {last}"
                         + (f"; its log ends:\n{tail(log)}" if log else ""))


def member_conf(tmp: str, name: str, eport: int, rport: int, pgport: int,
                 own: str = "") -> str:
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
{own}""")
    shutil.chown(conf, "postgres", "postgres")
    os.chmod(conf, 0o600)
    return conf


def cluster(own: dict[str, str] | None = None, count: int = 2):
    for exe in ("patroni", "etcd"):
        if not shutil.which(exe):
            raise RuntimeError(f"{exe} not found: scripts/test.sh installs Debian's patroni "
                               "and etcd-server packages")
    tmp = tempfile.mkdtemp(prefix="hpadvise-patroni-")
    os.chmod(tmp, 0o755)
    shutil.chown(tmp, "postgres", "postgres")
    eport, peer = free_port(), free_port()
    procs = []
    try:
        elog = f"{tmp}/etcd.log"
        with open(elog, "w") as out:
            procs.append(subprocess.Popen(
                ["etcd", "--name", "hpadvise-test", "--data-dir", f"{tmp}/etcd",
                 "--listen-client-urls", f"http://127.0.0.1:{eport}",
                 "--advertise-client-urls", f"http://127.0.0.1:{eport}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-cluster", f"hpadvise-test=http://127.0.0.1:{peer}"],
                stdout=subprocess.DEVNULL, stderr=out, start_new_session=True))
        wait_json(f"http://127.0.0.1:{eport}/version", 30, proc=procs[0], log=elog)
        import pwd
        pw = pwd.getpwnam("postgres")
        members = {}
        for name, role in (("member1", "master"), ("member2", "replica"))[:count]:
            rport, pgport = free_port(), free_port()
            conf = member_conf(tmp, name, eport, rport, pgport, (own or {}).get(name, ""))
            log = f"{tmp}/{name}.log"
            with open(log, "w") as out:
                procs.append(subprocess.Popen(["patroni", conf], cwd=tmp, user=pw.pw_uid,
                                              group=pw.pw_gid, extra_groups=[], stdout=out,
                                              stderr=subprocess.STDOUT, start_new_session=True))
            # Patroni 3.0 still calls the leader "master" in its API
            wait_json(f"http://127.0.0.1:{rport}/patroni", 120,
                      lambda d, role=role: d.get("state") == "running" and d.get("role") == role,
                      procs[-1], log)
            members[name] = {"datadir": f"{tmp}/{name}", "config": conf, "api": rport,
                             "pgport": pgport}
        yield {**members["member1"], "members": members}
    finally:
        # the Patroni members first, together (each stops its postmaster on SIGTERM and may
        # still ask etcd as it does), then etcd
        for group in (procs[1:], procs[:1]):
            for p in group:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
            for p in group:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        subprocess.run(["pkill", "-KILL", "-f", f"{tmp}/member"], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


