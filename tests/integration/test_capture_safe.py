"""`hpadvise capture` as safe as apply, on real throwaway clusters: a capture stacked on a
killed one's active journal is refused with the command that ends it; statements (and the
passwords in them) land only in the capture where a logging collector runs, never in the
server's own log nor in a base backup; where they cannot be kept out (stderr into a file)
the capture asks for --yes first; an interrupt says only what happened."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]

LOGGING = ("log_statement", "log_connections", "log_disconnections", "log_destination",
           "log_line_prefix", "lc_messages", "log_min_error_statement", "log_directory",
           "log_filename")
SECRET = "S3cretPW!"


def cluster(pg_factory, collector: bool):
    c = pg_factory({"logging_collector": "on", "log_directory": "'log'"} if collector else {})
    c.start()
    c.psql("CREATE ROLE x LOGIN")
    return c


def logging_state(c) -> dict:
    return {k: c.psql(f"SHOW {k}") for k in LOGGING} | {
        "auto.conf": Path(f"{c.datadir}/postgresql.auto.conf").read_bytes()}


def settled(c, before: dict, seconds: float = 10) -> dict:
    """The logging state once the reload has reached every process (it is asynchronous)."""
    deadline = time.time() + seconds
    while (now := logging_state(c)) != before and time.time() < deadline:
        time.sleep(0.2)
    return now


def own_dirs() -> set[str]:
    import tempfile
    t = tempfile.gettempdir()
    return {d for d in os.listdir(t) if d.startswith("hpadvise-capture-")}


def holding(root, secret: str = SECRET) -> list[str]:
    """Every file under `root` whose bytes hold `secret`."""
    out = []
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            try:
                if secret.encode() in Path(p).read_bytes():
                    out.append(p)
            except OSError:
                pass
    return out


def start_capture(c, out, journal, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hpadvise.cli", "capture", "--instance",
                             c.datadir, "--duration", "5m", "--output", str(out),
                             "--journal-dir", str(journal), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(cond, seconds: float = 60) -> bool:
    deadline = time.time() + seconds
    while not cond() and time.time() < deadline:
        time.sleep(0.1)
    return cond()


def test_capture_stacked_on_a_killed_one_is_refused(pg_factory, tmp_path):
    """Table row 2: a capture SIGKILLed leaves log_statement = all and an active journal; a
    second capture is refused in one line naming `hpadvise rollback ID`, changing nothing;
    the rollback then puts every setting back, removes the capture's log directory, and
    calls the settings reloadable (row 8)."""
    c = cluster(pg_factory, collector=True)
    before, dirs = logging_state(c), own_dirs()
    journal = tmp_path / "journal"
    p = start_capture(c, tmp_path / "cap", journal, "--no-base")
    assert wait_for(lambda: c.psql("SHOW log_statement") == "all")
    p.send_signal(signal.SIGKILL)
    p.communicate()
    killed = logging_state(c)
    assert killed != before
    r = run_cli("capture", "--instance", c.datadir, "--duration", "5s", "--no-base",
                "--output", str(tmp_path / "cap2"), "--journal-dir", str(journal))
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("hpadvise: error")]
    assert r.returncode == 2 and len(errors) == 1, r.stderr
    [jid] = [j["id"] for j in json.loads(run_cli("history", "--json", "--journal-dir",
                                                 str(journal)).stdout)]
    assert f"`hpadvise rollback {jid}`" in errors[0] and "log_" in errors[0]
    assert not (tmp_path / "cap2").exists() and logging_state(c) == killed
    r = run_cli("rollback", "--yes", "--journal-dir", str(journal))
    assert r.returncode == 0, r.stderr
    assert "needs a restart" not in r.stdout + r.stderr and "reload" in r.stdout
    assert settled(c, before) == before and own_dirs() == dirs


def test_statements_land_only_in_the_capture(pg_factory, tmp_path):
    """Table row 4: with a logging collector, a password set during the capture is in the
    capture's statement log and nowhere else: not in the server's files (its log
    directory), not in the next capture's base backup (which leaves the server's log out),
    not in any output; the capture's own log directory is gone afterwards."""
    c = cluster(pg_factory, collector=True)
    before, dirs = logging_state(c), own_dirs()
    journal, out = tmp_path / "journal", tmp_path / "cap"
    p = start_capture(c, out, journal, "--no-base", "--duration", "8s")
    assert wait_for(lambda: c.psql("SHOW log_statement") == "all")
    c.psql(f"ALTER ROLE x PASSWORD '{SECRET}'")
    c.psql("SELECT 'still capturing'")
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stderr
    assert settled(c, before) == before and own_dirs() == dirs
    assert SECRET in (out / "statements.csv").read_text()  # the capture holds it
    assert holding(c.tmp) == []  # the server's data directory, its log, its stderr file
    assert SECRET not in stdout + stderr
    # The server's own log has one: the next capture's base backup leaves it out.
    c.psql(f"DO $$BEGIN RAISE LOG 'planted {SECRET}'; END$$")
    assert wait_for(lambda: holding(f"{c.datadir}/log"), 10)
    r = run_cli("capture", "--instance", c.datadir, "--duration", "3s", "--output",
                str(tmp_path / "cap2"), "--journal-dir", str(journal), timeout=300)
    assert r.returncode == 0, r.stderr
    base = tmp_path / "cap2" / "base"
    assert (base / "PG_VERSION").exists() and not (base / "log").exists()
    assert holding(base) == [] and not (base / "current_logfiles").exists()
    assert settled(c, before) == before and own_dirs() == dirs
    # Row 6: a capture with its own base backup is replayed on it, never on a copy taken now
    r = run_cli("validate", "--replay", str(tmp_path / "cap2"), "--instance", c.datadir,
                "--copy", "--duration", "60s")
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("hpadvise: error")]
    assert r.returncode == 2 and len(errors) == 1 and "its own base backup" in errors[0], \
        r.stderr


def test_stderr_route_asks_before_it_captures(pg_factory, tmp_path):
    """Table row 4, the route capture cannot control: the server's stderr file opened at its
    start. Refused without --yes in one line naming that file, nothing changed; with --yes
    it captures, and the warning names the file too."""
    c = cluster(pg_factory, collector=False)
    before = logging_state(c)
    r = run_cli("capture", "--instance", c.datadir, "--duration", "3s", "--no-base",
                "--output", str(tmp_path / "cap"), "--journal-dir", str(tmp_path / "j"))
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("hpadvise: error")]
    assert r.returncode == 2 and len(errors) == 1 and "--yes" in errors[0], r.stderr
    assert os.path.realpath(c.log) in errors[0]
    assert not (tmp_path / "cap").exists() and logging_state(c) == before
    r = run_cli("capture", "--instance", c.datadir, "--duration", "3s", "--no-base",
                "--yes", "--output", str(tmp_path / "cap"), "--journal-dir",
                str(tmp_path / "j"))
    assert r.returncode == 0, r.stderr
    assert settled(c, before) == before


def test_an_interrupt_says_only_what_happened(pg_factory, tmp_path):
    """Table row 5: SIGTERM during the base backup: exit 130, 'nothing was recorded and no
    setting was changed', no directory, no pg_basebackup left running. Row 11: an empty
    --output is refused as empty."""
    c = cluster(pg_factory, collector=True)
    c.psql("CREATE TABLE big AS SELECT g, repeat('x', 200) AS pad "
           "FROM generate_series(1, 2000000) g")
    before = logging_state(c)
    out = tmp_path / "cap"
    p = start_capture(c, out, tmp_path / "j")
    line = p.stdout.readline()
    assert "taking a base backup" in line, line
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    _, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, stderr
    assert "nothing was recorded and no setting was changed" in stderr
    assert "restored" not in stderr and "put back" not in stderr
    assert not out.exists() and logging_state(c) == before
    ps = subprocess.run(["pgrep", "-f", f"pg_basebackup -h {c.tmp}"], capture_output=True)
    assert ps.returncode == 1, ps.stdout
    r = run_cli("capture", "--instance", c.datadir, "--output", "")
    assert r.returncode == 2 and "--output: empty" in r.stderr, r.stderr
