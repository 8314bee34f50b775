"""Runs inside a guest with a Debian kernel of another release (scripts/guest.sh with
HPADVISE_GUEST_SUITE=trixie: 6.12; =sid: 7.2, under QEMU's emulation), booted with
hugetlb_cma=, hugetlb_free_vmemmap=on and thp_anon=: what that kernel made of each parameter,
what check plans from it, and what the kernel then grants. Writes /share/result.json for the
host's test and lab record to judge (tests/integration/test_trixie_guest.py,
test_sid_guest.py); judges nothing itself. Also writes an `hpadvise snapshot` of the guest to
/share/snapshot (tests/fixtures/guests/amd64-trixie-cma, amd64-sid-cma).

    python3 kernel_lab.py [case ...]     cases: facts plan plan_cma cma hvo modes unit_thp
"""

from __future__ import annotations

import os
import re

from guestlab import hp, run_cases, sh

HUGE = "/sys/kernel/mm/hugepages"
THP = "/sys/kernel/mm/transparent_hugepage"
GB = 1048576


def read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def meminfo() -> dict:
    return {k: int(v) for k, v in re.findall(r"^(\w+):\s+(\d+)", read("/proc/meminfo"), re.M)}


def set_pool(kb: int, n: int) -> int:
    with open(f"{HUGE}/hugepages-{kb}kB/nr_hugepages", "w") as f:
        f.write(str(n))
    return int(read(f"{HUGE}/hugepages-{kb}kB/nr_hugepages"))


def facts() -> dict:
    sizes = sorted(d for d in os.listdir(THP) if d.startswith("hugepages-"))
    m = meminfo()
    out = {"uname": os.uname().release, "cmdline": read("/proc/cmdline"),
           "hvo_sysctl": read("/proc/sys/vm/hugetlb_optimize_vmemmap"),
           "cma_kb": {k: m.get(k) for k in ("CmaTotal", "CmaFree")},
           "thp": {k: read(f"{THP}/{k}") for k in ("enabled", "shmem_enabled")},
           "mthp": {d: read(f"{THP}/{d}/enabled") for d in sizes},
           "boot_log": [ln for ln in sh("dmesg", check=False).stdout.splitlines()
                        if re.search(r"hugetlb|cma|thp_anon|HugeTLB|Unknown kernel", ln)][:40],
           "bad_page_lines": sum("Bad page state" in ln for ln in
                                 sh("dmesg", check=False).stdout.splitlines())}
    sh("python3 -m hpadvise.cli snapshot /share/snapshot", check=False)
    return out


def plan(buffers: str = "3GB") -> dict:
    """check's plan for PostgreSQL sized at `buffers` of shared_buffers with 1 GiB pages
    preferred: the 1 GiB pool's feasibility (from the CMA area, or not)."""
    with open("/share/prefer.toml", "w") as f:
        # 1 GiB pages whatever rounding up to them wastes: the pool this lab is about
        f.write('name = "prefer"\n[pool]\ngigantic = "prefer"\nos_floor_pct = 5\n'
                'gigantic_max_waste_pct = 100\n')
    r = hp("size", "postgres", f"shared_buffers={buffers}", "--profile", "/share/prefer.toml",
           "--json")
    j = r.get("json") or {}
    return {"rc": r["rc"], "stderr": r["stderr"][-500:], "pools": j.get("pools"),
            "findings": [(f["code"], f["title"]) for f in j.get("findings", [])
                         if f["code"].startswith("pool.")]}


def plan_cma() -> dict:
    """The same with 1 GiB of shared_buffers: two 1 GiB pages, which a 2 GiB area holds."""
    return plan("1GB")


def modes() -> dict:
    """The THP modes a process can take here (prctl, thp_exec.supported)."""
    r = sh(["python3", "-c", "from hpadvise.facts.thp_exec import supported; "
            "print(' '.join(supported()))"], check=False)
    return {"supported": r.stdout.split(), "stderr": r.stderr[-300:]}


NEVER_PG = """name = "never-pg"
description = "THP always for the host, none for PostgreSQL"
[thp]
enabled = "always"
defrag = "madvise"
shmem_enabled = "never"
[postgres]
thp = "never"
"""


UNIT = "pglab.service"
LAB = "/var/lib/postgresql/lab"


def _pg_unit() -> tuple[str, int | None]:
    """A PostgreSQL cluster of its own, run by systemd (PID 1) as the unit pglab.service
    (started once), and its postmaster."""
    import glob
    if sh(["systemctl", "is-active", UNIT], check=False).stdout.strip() != "active":
        bindir = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1]
        sh(["rm", "-rf", LAB])
        sh(["runuser", "-u", "postgres", "--", f"{bindir}/initdb", "-D", LAB, "-A", "trust",
            "--no-sync"])
        with open(f"{LAB}/postgresql.conf", "a") as f:
            f.write("\nport = 5433\nlisten_addresses = ''\nunix_socket_directories = '/tmp'\n"
                    "shared_buffers = 128MB\nmax_connections = 20\nfsync = off\n")
        with open(f"/etc/systemd/system/{UNIT}", "w") as f:
            f.write("[Unit]\nDescription=lab PostgreSQL\n[Service]\nType=notify\n"
                    f"User=postgres\nExecStart={bindir}/postgres -D {LAB}\nKillMode=mixed\n"
                    "TimeoutSec=300\n")
        sh(["systemctl", "daemon-reload"])
        sh(["systemctl", "start", UNIT])
    pid = sh(["systemctl", "show", "--property=MainPID", "--value", UNIT],
             check=False).stdout.strip()
    return UNIT, int(pid) if pid.isdigit() and pid != "0" else None


def _thp_enabled(pid: int | None) -> str | None:
    m = re.search(r"^THP_enabled:\s*(\d)", read(f"/proc/{pid}/status"), re.M) if pid else None
    return m.group(1) if m else None


def unit_thp() -> dict:
    """PostgreSQL run by systemd as a unit of its own, kept off THP under a host-wide
    `always`: apply writes the unit's MemoryTHP= drop-in, reloads systemd and restarts the
    unit; the postmaster then reads THP_enabled 0. Rolled back: the drop-in gone, the
    postmaster restarted in the host's mode."""
    with open(f"{THP}/enabled", "w") as f:
        f.write("always")
    unit, pid0 = _pg_unit()
    with open("/share/never-pg.toml", "w") as f:
        f.write(NEVER_PG)
    out = {"systemd": sh(["systemctl", "--version"], check=False).stdout.split("\n")[0],
           "unit": unit, "before": _thp_enabled(pid0)}
    a = hp("apply", "--db", "postgres", "--instance", LAB, "--profile",
           "/share/never-pg.toml", "--restart", "--yes", "--no-persist", "--json")
    unit2, pid1 = _pg_unit()
    dropin = f"/etc/systemd/system/{unit}.d/hpadvise-thp.conf"
    out.update(apply_rc=a["rc"], apply_stderr=a["stderr"][-800:],
               changes=[(c["kind"], c["target"], c["status"]) for c in
                        (a.get("json") or {}).get("changes", [])],
               dropin=read(dropin), memory_thp=sh(["systemctl", "show", "--property=MemoryTHP",
                                                   "--value", unit], check=False).stdout.strip(),
               restarted=pid1 != pid0, after=_thp_enabled(pid1))
    r = hp("rollback", "--yes", "--json")
    _, pid2 = _pg_unit()
    out.update(rollback_rc=r["rc"], rollback_stderr=r["stderr"][-800:],
               dropin_after=os.path.exists(dropin), after_rollback=_thp_enabled(pid2))
    return out


def cma() -> dict:
    """The 1 GiB pool grown at runtime: from the CMA area, read back, and released; where the
    kernel grants fewer than asked, once more after the page cache is dropped (what sits in
    the area then has less to move), with the kernel's own words on the failure."""
    before = meminfo()
    got = set_pool(GB, 2)
    during = meminfo()
    out = {"granted": got, "cma_free_kb": [before.get("CmaFree"), during.get("CmaFree")]}
    if got < 2:
        sh("sync; echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory",
           check=False)
        out["granted_after_drop"] = set_pool(GB, 2)
        out["cma_free_after_drop_kb"] = meminfo().get("CmaFree")
    out["kernel_said"] = [ln for ln in sh("dmesg", check=False).stdout.splitlines()
                          if re.search(r"cma|alloc_contig|hugetlb", ln, re.I)][-12:]
    out["released_to"] = set_pool(GB, 0)
    return out


def hvo() -> dict:
    """A 2 MiB pool of 400 pages with HVO on: MemFree falls by the pool less what HVO frees
    (7 of 8 vmemmap pages a page: 28 KiB), then the pool shrinks back."""
    before = meminfo()["MemFree"]
    got = set_pool(2048, 400)
    after = meminfo()["MemFree"]
    back = set_pool(2048, 0)
    return {"granted": got, "memfree_drop_kb": before - after, "pool_kb": got * 2048,
            "released_to": back, "bad_page_lines": sum(
                "Bad page state" in ln for ln in sh("dmesg", check=False).stdout.splitlines())}


def cleanup() -> None:
    for kb in (GB, 2048):
        try:
            set_pool(kb, 0)
        except OSError:
            pass


if __name__ == "__main__":
    result: dict = {}
    run_cases({"facts": facts, "plan": plan, "plan_cma": plan_cma, "cma": cma, "hvo": hvo,
               "modes": modes, "unit_thp": unit_thp}, result, cleanup)
