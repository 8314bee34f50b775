"""Runs inside the arm64 guest (scripts/guest.sh, Debian 12's arm64 kernel with the 4 KiB
granule, under QEMU's emulation): the kernel's page geometry, PostgreSQL 15 sized, applied and
rolled back on 2 MiB and on 32 MiB pages, probe on the guest's sizes, and a JVM on 32 MiB large
pages counted per region. Writes what it saw to /share/result.json for the host's test to judge
(tests/integration/test_arm64_guest.py); judges nothing itself.

    python3 arm64_lab.py [case ...]     cases: geometry pg2m pg32m probe jvm (default: all)

With LAB_SNAPSHOTS=1 it also writes an `hpadvise snapshot` tree of the guest with PostgreSQL
on 32 MiB pages to /share/snapshot-arm64 (tests/fixtures/guests/arm64-4k-pg32m).
"""

from __future__ import annotations

import os
import re
import subprocess
import time

from guestlab import hp, run_cases, sh

# hpadvise is on the guest's PYTHONPATH (/share/pylib)
from hpadvise.plugins.postgres.actions import read_pid as postmaster

PG = "/usr/lib/postgresql/15/bin"
DATA = "/var/lib/postgresql/lab"
PORT = 5440
HUGE = "/sys/kernel/mm/hugepages"


def pools() -> dict:
    return {d.split("-")[1]: int(open(f"{HUGE}/{d}/nr_hugepages").read())
            for d in sorted(os.listdir(HUGE))}


def set_pool(kb: int, n: int) -> None:
    with open(f"{HUGE}/hugepages-{kb}kB/nr_hugepages", "w") as f:
        f.write(str(n))


def geometry() -> dict:
    buddy = open("/proc/buddyinfo").read().splitlines()
    # a child cgroup with the hugetlb controller shows its files, named per size
    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
        f.write("+hugetlb")
    os.makedirs("/sys/fs/cgroup/hplab", exist_ok=True)
    cg = sorted(f for f in os.listdir("/sys/fs/cgroup/hplab") if f.startswith("hugetlb.")
                and f.endswith(".max") and ".rsvd." not in f)
    os.rmdir("/sys/fs/cgroup/hplab")
    return {"kernel": os.uname().release, "machine": os.uname().machine,
            "page_size": os.sysconf("SC_PAGE_SIZE"),
            "hugetlb_sizes": sorted(os.listdir(HUGE)),
            "pmd_size": int(open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").read()),
            "thp_enabled": open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip(),
            "default": re.search(r"Hugepagesize:\s+(\d+)", open("/proc/meminfo").read()).group(1),
            "buddy_orders": len(buddy[0].split()) - 4 if buddy else None,
            "cgroup_files": cg}


def huge_mappings(pid: int) -> dict:
    """KernelPageSize -> kB of the process's hugetlb mappings (smaps)."""
    out: dict = {}
    size = None
    page = None
    for ln in open(f"/proc/{pid}/smaps"):
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", ln):
            size = page = None
        elif ln.startswith("Size:"):
            size = int(ln.split()[1])
        elif ln.startswith("KernelPageSize:"):
            page = int(ln.split()[1])
        elif ln.startswith("MMUPageSize:") and page and page > os.sysconf("SC_PAGE_SIZE") // 1024:
            out[str(page)] = out.get(str(page), 0) + (size or 0)
    return out


def _mappings_of(pid: int, page_kb: int) -> list:
    """(address range, Size kB) of each mapping on `page_kb` pages (smaps)."""
    out, head, size = [], None, None
    for ln in open(f"/proc/{pid}/smaps"):
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", ln):
            head, size = ln.split()[0], None
        elif ln.startswith("Size:"):
            size = int(ln.split()[1])
        elif ln.startswith("KernelPageSize:") and int(ln.split()[1]) == page_kb:
            out.append((head, size))
    return out


def pg(huge_page_size: str | None) -> dict:
    """A cluster with 256 MB of buffers on the default size or `huge_page_size`: the server's
    own count, check's, apply --restart, rollback."""
    out: dict = {}
    sh(f"rm -rf {DATA}")
    sh(f"runuser -u postgres -- {PG}/initdb -D {DATA} -A trust --no-sync")
    with open(f"{DATA}/postgresql.conf", "a") as f:
        f.write(f"\nport = {PORT}\nlisten_addresses = ''\nunix_socket_directories = '/tmp'\n"
                "shared_buffers = 256MB\nmax_connections = 20\nfsync = off\nhuge_pages = try\n"
                + (f"huge_page_size = {huge_page_size}\n" if huge_page_size else ""))
    own = sh(f"runuser -u postgres -- {PG}/postgres -D {DATA} -C "
             "shared_memory_size_in_huge_pages", check=False)
    out["server_count"] = own.stdout.strip()
    sh(f"runuser -u postgres -- {PG}/pg_ctl -D {DATA} -l {DATA}/log -w start")
    c = hp("check", "--db", "postgres", "--json")
    j = c.get("json") or {}
    inst = next((i for i in j.get("instances", []) if str(PORT) in i.get("id", "")), {})
    out["check"] = {"rc": c["rc"], "stderr": c["stderr"], "demand": inst.get("demand"),
                    "pools": (j.get("plan") or {}).get("pools"),
                    "findings": [(f["code"], f["evidence"]) for f in j.get("findings", [])]}
    a = hp("apply", "--db", "postgres", "--restart", "--yes", "--json")
    out["apply"] = {"rc": a["rc"], "stderr": a["stderr"],
                    "changes": [(x["target"], x["before"], x["after"], x["status"])
                                for x in (a.get("json") or {}).get("changes", [])
                                if x["kind"] != "file"]}
    out["after_apply"] = {"pools": pools(), "maps": huge_mappings(postmaster(DATA))
                          if postmaster(DATA) else None,
                          "persisted": sh("cat /etc/sysctl.d/*hpadvise* "
                                          "/etc/systemd/system/hpadvise-hugepages.service "
                                          "2>/dev/null", check=False).stdout[-1500:]}
    if huge_page_size and os.environ.get("LAB_SNAPSHOTS"):  # the unit tests' fixture
        sh(["rm", "-rf", "/share/snapshot-arm64"])
        out["snapshot"] = hp("snapshot", "/share/snapshot-arm64")["rc"]
    r = hp("rollback", "--yes", "--json")
    out["rollback"] = {"rc": r["rc"], "stderr": r["stderr"], "json": r.get("json")}
    out["after_rollback"] = {"pools": pools(), "maps": huge_mappings(postmaster(DATA))
                             if postmaster(DATA) else None}
    sh(f"runuser -u postgres -- {PG}/pg_ctl -D {DATA} -m fast -w stop", check=False)
    return out


def probe() -> dict:
    r = hp("probe", "--size", "1GiB", "--accesses", "1000000", "--runs", "1", "--json")
    j = r.get("json") or {}
    return {"rc": r["rc"], "stderr": r["stderr"][-1500:],
            "variants": [(v["name"], v["page_kb"], v["ns"], v["skipped"], v["backing"])
                         for v in j.get("variants", [])], "pools_after": pools()}


def jvm() -> dict:
    """A JVM with -XX:LargePageSizeInBytes=32m: what it maps on each size (smaps), what
    check counts."""
    out: dict = {"pools_before": pools()}
    set_pool(32768, 24)
    set_pool(2048, 200)
    set_pool(64, 200)
    java = subprocess.Popen(["java", "-XX:+UseLargePages", "-XX:LargePageSizeInBytes=32m",
                             "-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch",
                             "-Xlog:pagesize:file=/tmp/pagesize.log", "-cp", "/share", "Sleep"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not os.path.exists("/tmp/jvm-ready"):
            if java.poll() is not None:
                raise RuntimeError(f"java exited: {java.stderr.read().decode()[-800:]}")
            time.sleep(1)
        out["smaps"] = huge_mappings(java.pid)
        out["maps_64k"] = _mappings_of(java.pid, 64)
        out["pools_held"] = {k: int(open(f"{HUGE}/hugepages-{k}kB/nr_hugepages").read())
                             - int(open(f"{HUGE}/hugepages-{k}kB/free_hugepages").read())
                             for k in (64, 2048, 32768)}
        c = hp("check", "--db", "jvm", "--json")
        j = c.get("json") or {}
        inst = next((i for i in j.get("instances", []) if i.get("pid") == java.pid), {})
        out["check"] = {"rc": c["rc"], "stderr": c["stderr"][-1500:],
                        "demand": inst.get("demand"), "backing": inst.get("backing"),
                        "findings": [(f["code"], f["evidence"]) for f in j.get("findings", [])
                                     if f.get("instance") == inst.get("id")]}
        out["pagesize_log"] = open("/tmp/pagesize.log").read()[-6000:]
    finally:
        java.kill()
        java.wait()
    for kb in (32768, 2048, 64):
        set_pool(kb, 0)
    out["pools_after"] = pools()
    return out


CASES = {"geometry": geometry, "pg2m": lambda: pg(None), "pg32m": lambda: pg("32MB"),
         "probe": probe, "jvm": jvm}


def main() -> None:
    run_cases(CASES, {}, lambda: sh(f"runuser -u postgres -- {PG}/pg_ctl -D {DATA} -m fast -w "
                                    "stop", check=False))


if __name__ == "__main__":
    main()
