"""apply and rollback killed (SIGKILL) at every step, the restart included, on a real
cluster, a real kernel and real files: whatever was interrupted, a following rollback leaves
every knob, file, directory and setting as it was before the first apply, and the server
running on its old settings."""


import pytest

from support import THP, host_state, pg_ctl_done, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]

# The steps of this apply: compact, pool, THP enabled, the directories etc and etc/sysctl.d
# (new under the test root), the sysctl.d file, huge_pages, the restart.
STEPS = 8


@pytest.fixture
def setup(pg_factory, knobs, tmp_path):
    knobs.set(f"{THP}/enabled", "always")  # so that apply has a THP change to make
    c = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    c.start()
    j, p = tmp_path / "journal", tmp_path / "root"
    p.mkdir()
    return c, j, p, host_state(c, p)


def apply(c, j, p, env=None):
    return run_cli("apply", "--db", "postgres", "--instance", c.datadir, "--yes", "--restart",
                   "--journal-dir", str(j), "--persist-root", str(p), env=env)


def rollback(j, env=None):
    return run_cli("rollback", "--yes", "--journal-dir", str(j), env=env)


def as_before(c, p, before):
    assert host_state(c, p) == before and not (p / "etc").exists()
    assert c.running() and c.psql("SHOW huge_pages") == "try"


@pytest.mark.parametrize("kill_after", range(1, STEPS + 2))
def test_apply_killed_after_each_step(setup, kill_after):
    c, j, p, before = setup
    r = apply(c, j, p, env={"HPADVISE_TEST_KILL_AFTER": str(kill_after)})
    assert r.returncode == (-9 if kill_after <= STEPS else 0), r.stdout + r.stderr
    r = rollback(j)
    assert r.returncode == 0, r.stdout + r.stderr
    as_before(c, p, before)


def test_apply_killed_during_the_restart(setup):
    """Killed while pg_ctl restarts the server (with dirty buffers the shutdown checkpoint
    takes a while): the server may come up on its new settings, or stay down."""
    c, j, p, before = setup
    c.psql("CREATE TABLE dirt AS SELECT g, repeat('x', 100) AS pad "
           "FROM generate_series(1, 300000) g")
    r = apply(c, j, p, env={"HPADVISE_TEST_KILL_IN_RESTART": "0.1"})
    assert r.returncode == -9, r.stdout + r.stderr
    pg_ctl_done(c.datadir)  # the orphaned pg_ctl ends its restart without apply
    r = rollback(j)
    assert r.returncode == 0, r.stdout + r.stderr
    as_before(c, p, before)


@pytest.mark.parametrize("kill_after", range(STEPS - 1, 0, -1))
def test_rollback_killed_after_each_restore(setup, kill_after):
    """Rollback restores change N (newest first), then is killed; a second rollback finishes
    the job (knobs already back are left alone)."""
    c, j, p, before = setup
    assert apply(c, j, p).returncode == 0
    r = rollback(j, env={"HPADVISE_TEST_KILL_ROLLBACK_AFTER": str(kill_after)})
    assert r.returncode == -9, r.stdout + r.stderr
    r = rollback(j)
    assert r.returncode == 0, r.stdout + r.stderr
    as_before(c, p, before)


def test_rollback_killed_during_its_restart(setup):
    c, j, p, before = setup
    assert apply(c, j, p).returncode == 0
    c.psql("CREATE TABLE dirt AS SELECT g, repeat('x', 100) AS pad "
           "FROM generate_series(1, 300000) g")
    r = rollback(j, env={"HPADVISE_TEST_KILL_IN_RESTART": "0.1"})
    assert r.returncode == -9, r.stdout + r.stderr
    pg_ctl_done(c.datadir)
    r = rollback(j)
    assert r.returncode == 0, r.stdout + r.stderr
    as_before(c, p, before)
