"""A process's own THP mode on this kernel, by effect: under THP `enabled = always`, a
process in each mode (the default, advised-only, off; hpadvise.facts.thp_exec.set_mode before the
measuring program runs, as `hpadvise thp-exec` does) maps 64 MiB of private memory twice, one
region madvise(MADV_HUGEPAGE)d, touches every page, and reports what smaps says of each
region (AnonHugePages, THPeligible) and its /proc/PID/status THP_enabled. Then a PostgreSQL
backend's own memory (a 64 MiB variable of a DO block, while it sleeps) before and after
`apply --restart` with a profile that keeps PostgreSQL to madvise, and after the rollback.
THP enabled is put back as found.

    flock /tmp/hpadvise-knobs.lock .venv/bin/python lab/process_thp.py lab/results/process-thp.json
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from support import PgCluster  # noqa: E402

ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
PROBE = r"""
import mmap, os, re, sys
from hpadvise.facts.thp_exec import set_mode
if sys.argv[1] != "inherit":
    set_mode(sys.argv[1])
import subprocess
code = '''
import mmap, os, re, json
size = 64 << 20
plain = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
asked = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
asked.madvise(mmap.MADV_HUGEPAGE)
for i in range(0, size, 4096):
    plain[i] = 1
    asked[i] = 1
out, cur = {}, None
for line in open(f"/proc/{os.getpid()}/smaps"):
    m = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
    if m:
        cur = int(m.group(2), 16) - int(m.group(1), 16) == size and line.split()[0]
    elif cur and line.split(":")[0] in ("AnonHugePages", "THPeligible", "VmFlags"):
        out.setdefault(cur, {})[line.split(":")[0]] = line.split(":", 1)[1].strip()
status = re.search(r"THP_enabled:\s*(\d)", open(f"/proc/{os.getpid()}/status").read())
regions = {"madvised" if "hg" in v.get("VmFlags", "") else "plain": v for v in out.values()}
print(json.dumps({"THP_enabled": status.group(1), **regions}))
'''
os.execvp(sys.executable, [sys.executable, "-c", code])
"""


def hpadvise(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpadvise.cli", *args], capture_output=True,
                          text=True, timeout=300)


def backend(c) -> dict:
    """A backend's own 64 MiB, as smaps shows it while it holds them."""
    import time
    from hpadvise.facts.thp_exec import process_mode
    hold = ("DO $$DECLARE t text := repeat('x', 64 * 1024 * 1024); BEGIN "
            "PERFORM pg_sleep(6); RAISE NOTICE '%', length(t); END$$")
    p = subprocess.Popen([f"{c.bindir}/psql", "-h", c.tmp, "-p", str(c.port), "-U", "postgres",
                          "-Atc", hold], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         **c.run_as)
    try:
        pid = None
        while not pid:
            time.sleep(0.5)
            pid = c.psql("SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep'")
        smaps = Path(f"/proc/{pid}/smaps").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
        anon = sum(int(x) for x in __import__("re").findall(r"AnonHugePages:\s+(\d+)", smaps))
        return {"mode": process_mode(status, smaps, True, 2048), "anon_huge_kb": anon}
    finally:
        p.kill()
        p.wait()


def main(out: str) -> None:
    was = ENABLED.read_text().split("[")[1].split("]")[0]
    result = {"kernel": os.uname().release, "modes": {}, "postgres": {}}
    journal = tempfile.mkdtemp(prefix="hpadvise-lab-journal-")
    os.environ["HPADVISE_JOURNAL_DIR"] = journal
    try:
        ENABLED.write_text("always")
        for mode in ("inherit", "advised", "never"):
            r = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True,
                               text=True, timeout=120)
            result["modes"][mode] = json.loads(r.stdout)
        profile = Path(journal) / "split.toml"
        profile.write_text('name = "split"\n[thp]\nenabled = "always"\n'
                           '[postgres]\nthp = "madvise"\n')
        c = PgCluster()
        c.start()
        try:
            result["postgres"]["before"] = backend(c)
            r = hpadvise("apply", "--db", "postgres", "--instance", c.datadir, "--profile",
                         str(profile), "--restart", "--no-persist", "--yes")
            result["postgres"]["apply"] = [ln for ln in r.stdout.splitlines()
                                           if ln.startswith("done:")]
            result["postgres"]["after_apply"] = backend(c)
            r = hpadvise("rollback", "--yes")
            result["postgres"]["rollback_rc"] = r.returncode
            result["postgres"]["after_rollback"] = backend(c)
        finally:
            c.destroy()
    finally:
        ENABLED.write_text(was)
        import shutil
        shutil.rmtree(journal, ignore_errors=True)
    Path(out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
