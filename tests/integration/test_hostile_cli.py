"""The hostile-input properties through the command line itself, on a real data directory:
generated postgresql.conf files (with includes) and profiles. Whatever they hold: exit 0, or
exit 2 with one line on stderr naming what is wrong; no traceback; no secret; the host's
knobs and the data directory as they were."""

import os
import shutil
import string
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "unit"))
from test_hostile_parsers import conf_text, toml_value  # noqa: E402

from support import host_state, run_cli  # noqa: E402

pytestmark = pytest.mark.integration

SECRET = "PlantedPw4471"
CLI = settings(max_examples=int(os.environ.get("HPADVISE_HYPOTHESIS_CLI_EXAMPLES", 12)),
               deadline=None, database=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])


def _tree(d: Path) -> dict:
    return {str(p): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _judge(r, before_host, before_tree, datadir: Path) -> None:
    out = r.stdout + r.stderr
    assert "Traceback" not in out and SECRET not in out, out[-800:]
    assert r.returncode in (0, 2), (r.returncode, r.stderr[-500:])
    if r.returncode == 2:
        lines = r.stderr.strip().splitlines()
        assert lines and all(ln.startswith("hpadvise: error: ") for ln in lines), r.stderr
    assert host_state() == before_host
    assert _tree(datadir) == before_tree


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """One stopped cluster (initdb'd once); each example writes its own configuration."""
    from support import PgCluster, pg_bindir
    if pg_bindir() is None or os.geteuid() != 0:
        pytest.skip("needs root and PostgreSQL (scripts/test.sh installs it)")
    c = PgCluster({"shared_buffers": "32MB"})
    yield c
    c.destroy()


@CLI
@given(main=conf_text(), other=conf_text())
def test_check_pgdata_with_generated_configuration(stopped, main, other):
    d = Path(stopped.datadir)
    (d / "conf.d").mkdir(exist_ok=True)
    (d / "postgresql.conf").write_text(main + f"primary_conninfo = 'password={SECRET}'\n")
    (d / "self.conf").write_text(other + "include 'self.conf'\n")
    (d / "conf.d" / "a.conf").write_text(other)
    for p in (d / "postgresql.conf", d / "self.conf", d / "conf.d", d / "conf.d" / "a.conf"):
        shutil.chown(p, "postgres")
    before_host, before_tree = host_state(), _tree(d)
    r = run_cli("check", "--json", "--pgdata", str(d), "--db", "postgres")
    _judge(r, before_host, before_tree, d)


@CLI
@given(pool=st.dictionaries(st.sampled_from(["headroom_pct", "os_floor_pct", "os_floor",
                                             "gigantic_max_waste_pct", "nope"]),
                            st.one_of(st.floats(), st.integers(-10**6, 10**6),
                                      st.text(string.printable, max_size=6)), max_size=3))
def test_check_with_a_generated_profile(tmp_path, pool):
    path = tmp_path / "p.toml"
    path.write_text('name = "p"\n[pool]\n' + "".join(f"{k} = {toml_value(v)}\n"
                                                     for k, v in pool.items()))
    before_host = host_state()
    r = run_cli("check", "--json", "--profile", str(path), "--db", "postgres")
    _judge(r, before_host, {}, tmp_path / "none")
