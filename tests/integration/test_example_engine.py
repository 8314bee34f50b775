"""The worked example engine (tests/example/hpdemo.py, docs/writing-an-engine.md) goes through
check, apply and rollback on a real hpdemo-server process and real pools, registered exactly
as a third-party engine is, and through the same library calls the CLI makes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpadvise.act import apply as ap_mod
from hpadvise.act import script as script_mod
from hpadvise.ledger import journal as jr
from hpadvise.cli import main
from hpadvise.api.engines import registry
from hpadvise.planning.pipeline import inspect
from hpadvise.planning.plan import build
from hpadvise.facts.sysroot import SysRoot

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "example"))
from hpdemo import DemoEngine  # noqa: E402

SERVER = Path(__file__).resolve().parent.parent / "example" / "hpdemo-server"
POOL = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"


@pytest.fixture
def demo(tmp_path, knobs):
    """An hpdemo-server with a 24 MiB buffer on normal pages; the engine registered."""
    knobs.pool(2048, 0)
    shutil.copy(SERVER, tmp_path / "hpdemo-server")
    config = tmp_path / "demo.conf"
    config.write_text("# the example server's config\nbuffer_mb = 24\nhuge_pages = off\n")
    subprocess.Popen([str(tmp_path / "hpdemo-server"), str(config)], start_new_session=True)
    for _ in range(100):
        if Path(f"{config}.pid").exists():
            break
        time.sleep(0.05)
    registry.register(DemoEngine)
    try:
        yield config
    finally:
        registry.unregister("hpdemo")
        try:
            os.kill(int(Path(f"{config}.pid").read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
        time.sleep(0.2)  # its pages go back before the knobs fixture shrinks the pool


def _plan():
    report = inspect(SysRoot("/"), "oltp", engine_names=["hpdemo"])
    return build(report.host, report.instances, report.profile, report.engines)


def test_example_engine_check_apply_rollback(demo, tmp_path):
    before = demo.read_bytes()
    # check: found, sized exactly (24 MiB = 12 pages of 2 MiB), and the plan for it
    r = _plan()
    [inst] = r.instances
    assert inst.demand.pages[2048] == 12 and inst.backing == "4k"
    assert [f.code for f in r.findings if f.instance == inst.id] == ["hpdemo.huge_pages.off"]
    assert {(c.target, c.recommended) for c in r.changes} >= {
        ("hugepages-2048kB/nr_hugepages", 13), ("huge_pages", "on")}
    # apply, with the restart, as `hpadvise apply --db hpdemo --restart --no-persist` does
    plan = ap_mod.prepare(r, r.engines, restart=True, persist=False)
    script = script_mod.script(plan)
    assert f"cat > {demo} <<'HPADVISE_EOF'" in script and "kill -TERM" in script
    res = ap_mod.execute(plan, str(tmp_path / "journal"), {"argv": ["test"]})
    assert res.status == "ok", res.problems
    assert "huge_pages = on" in demo.read_text()
    r = _plan()
    assert len(r.instances) == 1, [(i.id, i.running, i.found) for i in r.instances]
    [inst] = r.instances
    assert inst.backing == "hugetlb" and inst.demand.held_pages == 12
    assert [f.code for f in r.findings if f.instance == inst.id] == ["hpdemo.huge_pages.active"]
    assert not [c for c in r.changes if c.instance == inst.id]  # nothing left to change
    # rollback: the config byte for byte, the pool, and a restart back onto normal pages
    j = jr.find(str(tmp_path / "journal"), res.journal)
    done, errors = jr.rollback(j)
    assert not errors, errors
    assert demo.read_bytes() == before
    assert _plan().instances[0].backing == "4k"
    assert int(Path(POOL).read_text()) == 0


def test_example_engine_adds_its_own_check_option(tmp_path, capsys):
    """`--demo-config` is the example engine's, not the core's: registered with the engine,
    `check` takes it, lists it in its help, and hands its values to the engine alone."""
    config = tmp_path / "stopped.conf"
    config.write_text("buffer_mb = 40\nhuge_pages = on\n")
    registry.register(DemoEngine)
    try:
        with pytest.raises(SystemExit) as e:
            main(["check", "--db", "hpdemo", "--demo-config", str(config), "--json"])
        assert e.value.code == 0
        report = json.loads(capsys.readouterr().out)
        with pytest.raises(SystemExit):
            main(["check", "--help"])
        assert "--demo-config FILE" in capsys.readouterr().out
    finally:
        registry.unregister("hpdemo")
    [i] = report["instances"]
    assert i["id"] == f"hpdemo:{config}" and not i["running"]
    assert i["demand"]["pages"]["2048"] == 20  # 40 MiB in 2 MiB pages
    # without the engine the option is unknown: bad input, one line, exit 2
    with pytest.raises(SystemExit) as e:
        main(["check", "--demo-config", str(config)])
    assert e.value.code == 2 and "--demo-config" in capsys.readouterr().err

