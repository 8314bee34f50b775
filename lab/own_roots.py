"""Servers in roots of their own: what hpadvise plans for each, and what each then takes.

For MySQL 9.7 (Debian sid), MariaDB 11.8 and PostgreSQL 17 (Debian trixie), each started in
its root in private mount and PID namespaces (tests/roots.py; the roots from
scripts/roots.sh), with a 1 GiB buffer pool / shared_buffers and no pool: `check` names the
version, user and demand; the pool is then set to exactly the planned pages and the server
restarted; its smaps say how many 2 MiB pages it holds and its log whether anything fell back.
Two more cases: MySQL on a pool of 200 pages (chunks fall back one by one) and MariaDB in a root
without /sys. Every pool is put back to 0.

    flock /tmp/hpadvise-knobs.lock .venv/bin/python lab/own_roots.py lab/results/own-roots.json
"""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from roots import RootServer  # noqa: E402
from roots_procs import held_pages  # noqa: E402

POOL = Path("/proc/sys/vm/nr_hugepages")


def check(pid: int) -> tuple[dict, list]:
    r = subprocess.run([sys.executable, "-m", "hpadvise.cli", "check", "--json"],
                       capture_output=True, text=True, timeout=120)
    report = json.loads(r.stdout)
    inst = next(i for i in report["instances"] if i.get("pid") == pid)
    return inst, [f for f in report["findings"] if f.get("instance") == inst["id"]]


def case(engine: str, options, pool: int | None = None, **kw) -> dict:
    s = RootServer(None, engine, options, **kw)
    try:
        s.start()
        inst, _ = check(s.pid)
        planned = inst["demand"]["pages"]["2048"]
        POOL.write_text(str(pool if pool is not None else planned))
        s.stop()
        s.start()
        inst, found = check(s.pid)
        took = held_pages(s.pid)
        log = [ln for ln in s.log_text().splitlines()
               if "large_page" in ln or "continuing to smaller size" in ln]
        s.stop()
        return {"engine": engine, "options": options, "version": inst["version"],
                "owner": inst["owner"], "planned_pages": planned,
                "pool": int(POOL.read_text()), "held_pages": took,
                "planned_over_held": round(planned / took, 4) if took else None,
                "backing": inst["backing"], "root": inst["settings"].get("root"),
                "findings": [f"{f['severity']} {f['code']}: {f['title']}" for f in found],
                "fallback_log_lines": len(log), **({"no_sys": True} if kw else {})}
    finally:
        s.destroy()
        POOL.write_text("0")


def main(out: str) -> None:
    big = ["--innodb-buffer-pool-size=1G", "--large-pages=ON"]
    results = [case("mysql", big), case("mariadb", big),
               case("postgres", {"shared_buffers": "1GB", "huge_pages": "try"}),
               case("mysql", big, pool=200),
               case("mariadb", big, pool=700, no_sys=True)]
    Path(out).write_text(json.dumps(results, indent=1) + "\n")
    for r in results:
        print(f"{r['engine']:9} {r['version']:36} planned {r['planned_pages']:4} pool "
              f"{r['pool']:4} held {r['held_pages']:4} {r['backing']:8} "
              f"{'; '.join(f for f in r['findings'] if 'large_pages' in f or 'fallback' in f)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "own-roots.json")
