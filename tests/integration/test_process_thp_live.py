"""A THP mode of their own for servers the host-wide mode gives more than they want, on this
Linux 6.18 with real servers: under enabled = always, a profile that keeps PostgreSQL and
Redis to madvise. apply restarts the PostgreSQL cluster in the advised-only mode (prctl before
pg_ctl, kept by the postmaster and every backend), journaled; a backend's own memory then gets
no THP, which it got before; rollback restarts it as it ran. A Redis started under
`hpadvise thp-exec --mode advised` is read as such; one that is not gets the plan's advice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import KernelKnobs, redis_server, run_cli

from hpadvise.facts.thp_exec import kernel_has_advised, process_mode

pytestmark = [pytest.mark.integration, pytest.mark.live]

PROFILE = """name = "split"
description = "THP always for the host, madvise for the databases"
[thp]
enabled = "always"
defrag = "madvise"
shmem_enabled = "never"
[postgres]
thp = "madvise"
[redis]
thp = "madvise"
"""
# a backend that holds 64 MiB of its own memory (written) while it sleeps: a variable of a
# DO block, allocated on its own mapping (glibc mmaps large allocations)
HOLD = ("DO $$DECLARE t text := repeat('x', 64 * 1024 * 1024); BEGIN PERFORM pg_sleep(8); "
        "RAISE NOTICE '%', length(t); END$$")


def backend_mode(c) -> str | None:
    """The THP mode a backend's own memory shows while it holds some (process_mode on its
    /proc): started by a query that holds memory, read while it sleeps."""
    p = subprocess.Popen([f"{c.bindir}/psql", "-h", c.tmp, "-p", str(c.port), "-U", "postgres",
                          "-Atc", HOLD], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         **c.run_as)
    try:
        deadline, pid = time.time() + 20, None
        while time.time() < deadline and not pid:
            time.sleep(0.5)
            pid = c.psql("SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep'")
        assert pid, "the holding query never reached its sleep"
        status = Path(f"/proc/{pid}/status").read_text()
        smaps = Path(f"/proc/{pid}/smaps").read_text()
        return process_mode(status, smaps, True, 2048)
    finally:
        p.kill()
        p.wait()


def instance(report: dict, iid: str) -> dict:
    return next(i for i in report["instances"] if i["id"] == iid)


@pytest.mark.skipif(not kernel_has_advised(os.uname().release),
                    reason="the advised-only THP mode needs Linux 6.18 (this kernel: "
                           f"{os.uname().release})")
def test_postgres_and_redis_kept_to_what_they_ask_under_always(knobs, pg_factory, tmp_path):
    KernelKnobs.set("/sys/kernel/mm/transparent_hugepage/enabled", "always")
    (tmp_path / "split.toml").write_text(PROFILE)
    profile = ("--profile", str(tmp_path / "split.toml"))
    c = pg_factory()
    c.start()
    assert backend_mode(c) == "inherit"  # its backends' memory gets THP under always
    wrapped = redis_server(tmp_path, sys.executable, "-m", "hpadvise.cli", "thp-exec", "--mode",
                           "advised", "--", extra=("--disable-thp", "no"))
    plain = redis_server(tmp_path, extra=("--disable-thp", "no"))
    w, pl = f"redis:{wrapped.port}", f"redis:{plain.port}"
    journal = os.environ["HPADVISE_JOURNAL_DIR"]  # this test's own (conftest.own_journal)
    try:
        r = run_cli("check", "--json", *profile)
        report = json.loads(r.stdout)
        pg_id = next(i["id"] for i in report["instances"]
                     if i["settings"].get("data_directory") == c.datadir)
        assert instance(report, w)["thp_mode"] == "advised"
        assert instance(report, pl)["thp_mode"] == "inherit"
        own = {ch["instance"]: ch["recommended"] for ch in report["plan"]["changes"]
               if ch["kind"] == "process_thp"}
        assert own.get(pg_id) == "advised" and own.get(pl) == "advised"
        assert w not in own  # runs in that mode already
        assert any(f["code"] == "thp.own_mode" and f["instance"] == w
                   for f in report["findings"])
        # Redis cannot be restarted by hpadvise (its title hides its command line): advice
        r = run_cli("apply", "--db", "redis", "--instance", pl, *profile,
                    "--dry-run")
        assert "hpadvise thp-exec --mode advised" in r.stdout, r.stdout + r.stderr
        # PostgreSQL: restarted in the mode, journaled
        r = run_cli("apply", "--db", "postgres", "--instance", c.datadir, *profile, "--restart",
                    "--no-persist", "--yes", "--journal-dir", str(journal), timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "THP mode advised" in r.stdout
        assert backend_mode(c) == "advised"  # a backend's own memory: no THP now
        report = json.loads(run_cli("check", "--json", *profile).stdout)  # its journal: ours
        assert instance(report, pg_id)["thp_mode"] == "advised"  # read back from the journal
        assert not [ch for ch in report["plan"]["changes"] if ch["kind"] == "process_thp"
                    and ch["instance"] == pg_id]  # applied: nothing more to do
        r = run_cli("rollback", "--yes", "--journal-dir", str(journal), timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert backend_mode(c) == "inherit"  # restarted as it ran
    finally:
        for p in (wrapped, plain):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
