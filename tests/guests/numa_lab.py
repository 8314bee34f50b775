"""Runs inside the two-node guest (scripts/guest.sh): PostgreSQL 15 bound to node 1 three ways
(numactl --membind, a cgroup's cpuset.mems, a systemd unit's AllowedMemoryNodes=), each
checked, applied with a restart and rolled back by hpadvise; the short-node start predicted by
check, then reproduced. Writes what it saw to /share/result.json for the host's test to judge
(tests/integration/test_numa_guest.py); judges nothing itself.

    python3 numa_lab.py [case ...]     cases: numactl cpuset systemd short short_cpuset surplus (default: all)

With LAB_SNAPSHOTS=1 it also writes `hpadvise snapshot` trees of the bound hosts to
/share/snapshot-membind and /share/snapshot-cpuset (tests/fixtures/guests/amd64-2node-*).
"""

from __future__ import annotations

import os
import re

from guestlab import hp, run_cases, sh

# hpadvise is on the guest's PYTHONPATH (/share/pylib)
from hpadvise.plugins.postgres.actions import read_pid as postmaster

PG = "/usr/lib/postgresql/15/bin"
DATA = "/var/lib/postgresql/lab"
TEMPLATE = "/var/lib/postgresql/lab-template"  # never started
PORT = 5440
CG = "/sys/fs/cgroup/hplab"
UNIT = "/etc/systemd/system/pglab.service"
NODES = "/sys/devices/system/node"
SIZE = "hugepages-2048kB"


def as_pg(cmd: str) -> str:
    return f"runuser -u postgres -- {cmd}"


def pools() -> dict:
    out = {}
    for n in (0, 1):
        d = f"{NODES}/node{n}/hugepages/{SIZE}"
        out[n] = {k: int(open(f"{d}/{k}_hugepages").read()) for k in ("nr", "free", "surplus")}
    return out


def set_node(n: int, pages: int) -> None:
    with open(f"{NODES}/node{n}/hugepages/{SIZE}/nr_hugepages", "w") as f:
        f.write(str(pages))


def server_facts() -> dict:
    """The running postmaster's binding and where its huge pages are (numa_maps N<node>=)."""
    pid = postmaster(DATA)
    if pid is None:
        return {"running": False}
    status = open(f"/proc/{pid}/status").read()
    maps = open(f"/proc/{pid}/numa_maps").read().splitlines()
    policies = sorted({ln.split()[1] for ln in maps if len(ln.split()) > 1})
    huge = {}
    for ln in maps:
        if "huge" in ln.split():
            for n, k in re.findall(r"\bN(\d+)=(\d+)", ln):
                huge[int(n)] = huge.get(int(n), 0) + int(k)
    return {"running": True, "pid": pid, "policies": policies,
            "mems_allowed": re.search(r"Mems_allowed_list:\s*(\S+)", status).group(1),
            "cgroup": open(f"/proc/{pid}/cgroup").read().strip(), "huge_pages_by_node": huge}


def write_conf(huge_pages: str) -> None:
    with open(f"{DATA}/postgresql.conf", "a") as f:
        f.write(f"\nhuge_pages = {huge_pages}\n")


def initdb() -> None:
    """A fresh cluster for a case: a copy of one initdb's directory, made at the first case
    (an initdb takes about 8 s on the guest's emulated CPUs, a copy under one)."""
    sh(f"rm -rf {DATA}")
    if not os.path.isdir(TEMPLATE):
        sh(as_pg(f"{PG}/initdb -D {TEMPLATE} -A trust --no-sync"))
    sh(["cp", "-a", TEMPLATE, DATA])
    with open(f"{DATA}/postgresql.conf", "a") as f:
        f.write(f"\nport = {PORT}\nlisten_addresses = ''\nunix_socket_directories = '/tmp'\n"
                "shared_buffers = 512MB\nmax_connections = 20\nfsync = off\n")
    write_conf("try")


def instance_view(check: dict) -> dict:
    """What check says of the lab's server: its binding, demand's node, the pool plan."""
    j = check.get("json") or {}
    inst = next((i for i in j.get("instances", []) if str(PORT) in i.get("id", "")), None)
    return {"rc": check["rc"], "stderr": check["stderr"],
            "numa_binding": inst and inst.get("numa_binding"),
            "node": inst and (inst.get("demand") or {}).get("node"),
            "pages": inst and (inst.get("demand") or {}).get("pages"),
            "findings": [(f["code"], f["evidence"]) for f in j.get("findings", [])],
            "pools": (j.get("plan") or {}).get("pools"),
            "sysctl_changes": [(c["target"], c["current"], c["recommended"])
                               for c in (j.get("plan") or {}).get("changes", [])
                               if c["kind"] == "sysctl"]}


ZONE = "/proc/sys/vm/zone_reclaim_mode"
DROP_IN = "/etc/sysctl.d/60-hpadvise.conf"


def sysctls() -> dict:
    """vm.zone_reclaim_mode now, and hpadvise's sysctl drop-in (None: there is none)."""
    text = open(DROP_IN).read() if os.path.exists(DROP_IN) else None
    return {"zone_reclaim_mode": int(open(ZONE).read()), "drop_in": text}


def cycle(start, stop, snapshot: str | None = None, zone: bool = False) -> dict:
    """Start bound, check, apply --restart, check, rollback; every step's facts. `zone`: with
    vm.zone_reclaim_mode set to 1 by hand first (the plan sets 0 on two nodes)."""
    out: dict = {}
    initdb()
    if zone:
        with open(ZONE, "w") as f:
            f.write("1")
    start()
    out["before"] = server_facts()
    if snapshot and os.environ.get("LAB_SNAPSHOTS"):  # the unit tests' fixtures
        sh(["rm", "-rf", f"/share/{snapshot}"])
        out["snapshot"] = hp("snapshot", f"/share/{snapshot}")["rc"]
    out["check"] = instance_view(hp("check", "--db", "postgres", "--json"))
    ap = hp("apply", "--db", "postgres", "--restart", "--yes", "--json")
    out["apply"] = {"rc": ap["rc"], "stderr": ap["stderr"], "json": ap.get("json"),
                    "stdout": ap.get("stdout")}
    out["after_apply"] = {"pools": pools(), "server": server_facts(), "sysctls": sysctls()}
    out["check_after"] = instance_view(hp("check", "--db", "postgres", "--json"))
    rb = hp("rollback", "--yes", "--json")
    out["rollback"] = {"rc": rb["rc"], "stderr": rb["stderr"], "json": rb.get("json"),
                       "stdout": rb.get("stdout")}
    out["after_rollback"] = {"pools": pools(), "server": server_facts(), "sysctls": sysctls()}
    stop()
    out["end_pools"] = pools()
    return out


def numactl_start() -> None:
    sh("numactl --membind=1 --cpunodebind=1 " + as_pg(f"{PG}/pg_ctl -D {DATA} -l {DATA}/log -w start"))


def pg_stop() -> None:
    sh(as_pg(f"{PG}/pg_ctl -D {DATA} -m fast -w stop"), check=False)


def cpuset_start() -> None:
    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
        f.write("+cpuset")
    os.makedirs(CG, exist_ok=True)
    for k, v in (("cpuset.mems", "1"), ("cpuset.cpus", "1")):
        with open(f"{CG}/{k}", "w") as f:
            f.write(v)
    sh(f"sh -c 'echo $$ > {CG}/cgroup.procs && exec "
       + as_pg(f"{PG}/pg_ctl -D {DATA} -l {DATA}/log -w start") + "'")


def systemd_start() -> None:
    with open(UNIT, "w") as f:
        f.write("[Unit]\nDescription=lab PostgreSQL bound to node 1\n[Service]\nType=notify\n"
                f"User=postgres\nExecStart={PG}/postgres -D {DATA}\nAllowedMemoryNodes=1\n"
                "AllowedCPUs=1\nKillMode=mixed\nTimeoutSec=300\n")
    sh("systemctl daemon-reload")
    sh("systemctl start pglab.service")


def systemd_stop() -> None:
    sh("systemctl stop pglab.service", check=False)


def short(bind: str = "membind") -> dict:
    """Node 0 holds the whole pool, node 1 none: check's prediction, then the starts, bound
    by a memory policy (numactl) or by a cpuset."""
    out: dict = {}
    initdb()
    start = numactl_start if bind == "membind" else cpuset_start
    start()
    view = instance_view(hp("check", "--db", "postgres", "--json"))
    demand = (view.get("pages") or {}).get("2048")
    set_node(0, (demand or 300) + 100)
    set_node(1, 0)
    out["pools"] = pools()
    out["check"] = instance_view(hp("check", "--db", "postgres", "--json"))
    # the start with huge_pages=on, bound to node 1: refused or not
    write_conf("on")
    pg_stop()
    r = _start_status(start)
    out["start_on"] = {"rc": r, "server": server_facts(),
                       "log": [ln for ln in open(f"{DATA}/log").read().splitlines()
                               if "FATAL" in ln][-2:]}
    write_conf("try")
    pg_stop()
    start()
    out["start_try"] = {"server": server_facts(), "pools": pools()}
    pg_stop()
    set_node(0, 0)
    set_node(1, 0)
    out["end_pools"] = pools()
    return out


def _start_status(start) -> int:
    try:
        start()
        return 0
    except RuntimeError:
        return 1


def surplus() -> dict:
    """The kernel's per-node write while another node holds surplus pages (what rollback's
    order avoids, advisor/changes/node_pools.py): a server bound to node 1 holds its pages, node 1 is
    written to 0 (its pages in use turn surplus), then node 0 is written to 0."""
    out: dict = {}
    initdb()
    write_conf("on")
    set_node(0, 2)
    set_node(1, 280)
    numactl_start()
    out["held"] = pools()
    set_node(1, 0)
    out["node1_written_0"] = pools()
    set_node(0, 0)
    out["node0_written_0"] = pools()
    pg_stop()
    out["server_stopped"] = pools()
    with open("/proc/sys/vm/nr_hugepages", "w") as f:
        f.write("0")
    out["end_pools"] = pools()
    return out


CASES = {
    "numactl": lambda: cycle(numactl_start, pg_stop, "snapshot-membind", zone=True),
    "cpuset": lambda: cycle(cpuset_start, pg_stop, "snapshot-cpuset"),
    "systemd": lambda: cycle(systemd_start, systemd_stop),
    "short": short,
    "short_cpuset": lambda: short("cpuset"),
    "surplus": surplus,
}


def main() -> None:
    result = {"kernel": os.uname().release,
              "nodes": sorted(n for n in os.listdir(NODES) if re.fullmatch(r"node\d+", n))}
    run_cases(CASES, result, lambda: (pg_stop(), systemd_stop()))


if __name__ == "__main__":
    main()
