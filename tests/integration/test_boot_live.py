"""Boot replay on this machine: apply writes the real /etc/sysctl.d, the pool is reset, the
real `sysctl --system` (procps) runs as boot would, and the pool comes back as check
predicted; a later /etc/sysctl.conf that overrides the plan is reported before apply, apply
refuses, and the replay gives exactly the value predicted. Every system file and every sysctl
the replay touches is put back."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hpadvise.facts import boot
from hpadvise.facts.sysroot import SysRoot
from support import check_json, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]
POOL = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"


def started(pg_factory):
    """A running 128 MB PostgreSQL on huge_pages = try, and check's report with it."""
    c = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    c.start()
    report, _ = check_json("--db", "postgres")
    return c, report


@contextlib.contextmanager
def applied(c, tmp_path):
    """apply for cluster c (JSON out, its own journal), rolled back however the block ends."""
    jdir = tmp_path / "journal"
    r = run_cli("apply", "--db", "postgres", "--instance", str(c.port), "--yes", "--json",
                "--journal-dir", str(jdir))
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        yield json.loads(r.stdout)
    finally:
        r = run_cli("rollback", "--yes", "--journal-dir", str(jdir))
        assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def system_files(knobs):
    """Plant files under the real /etc; restore them (and every sysctl a replay set)."""
    if not shutil.which("sysctl"):
        pytest.fail("sysctl (procps) not found")
    saved: dict[str, bytes | None] = {}
    values: dict[str, str] = {}

    class Files:
        def write(self, path, text):
            if path not in saved:
                saved[path] = Path(path).read_bytes() if os.path.lexists(path) else None
            Path(path).write_text(text)

        def replay(self):
            """What boot does with the sysctl files (procps, no systemd here)."""
            self.save()
            return subprocess.run(["sysctl", "--system"], capture_output=True, text=True)

        def save(self):
            """Keep every sysctl the system's files set, to put it back afterwards."""
            b = boot.read(SysRoot("/"), 2048)
            for f in boot.sysctl_files(SysRoot("/"), b.sysctl_engine):
                for line in Path(f).read_text().splitlines():
                    key = line.split("=")[0].strip().lstrip("-").replace(".", "/")
                    if "=" in line and not line.lstrip().startswith(("#", ";")):
                        p = f"/proc/sys/{key}"
                        if os.path.exists(p) and p not in values:
                            values[p] = Path(p).read_text()

    try:
        yield Files()
    finally:
        for path, data in saved.items():
            if data is None:
                if os.path.lexists(path):
                    os.unlink(path)
            else:
                Path(path).write_bytes(data)
        for p, v in values.items():
            try:
                Path(p).write_text(v)
            except OSError:
                pass


def test_apply_outranks_a_later_file_and_the_replay_gives_the_plan(system_files, knobs,
                                                                   pg_factory, tmp_path):
    system_files.write("/etc/sysctl.d/99-hpadvise-test.conf", "vm.nr_hugepages = 100\n")
    c, report = started(pg_factory)
    pool = {k["knob"]: k for k in report["plan"]["boot"]}["pool.2048"]
    assert pool["at_boot"] == "100" and "99-hpadvise-test.conf" in pool["source"]
    with applied(c, tmp_path) as out:
        [p] = [ch for ch in out["changes"] if ch["kind"] == "pool"]
        assert out["next_boot"] == []  # apply read the boot sources back: the plan holds
        files = [ch["target"] for ch in out["changes"] if ch["kind"] == "file"]
        assert "/etc/sysctl.d/99-zz-hpadvise.conf" in files  # sorts after 99-hpadvise-test
        report, _ = check_json("--db", "postgres")
        pool = {k["knob"]: k for k in report["plan"]["boot"]}["pool.2048"]
        assert pool["at_boot"] == str(p["after"]) and "99-zz-hpadvise" in pool["source"]
        # boot replay: the pool from scratch, then the sysctl files as boot applies them
        knobs.pool(2048, 0)
        assert system_files.replay().returncode == 0
        assert int(Path(POOL).read_text()) == p["after"]
    assert not os.path.exists("/etc/sysctl.d/99-zz-hpadvise.conf")


def test_etc_sysctl_conf_overrides_the_plan_it_is_said_and_the_replay_agrees(
        system_files, knobs, pg_factory, tmp_path):
    old = Path("/etc/sysctl.conf").read_text()
    system_files.write("/etc/sysctl.conf", old + "vm.nr_hugepages = 37\n")
    n = len(old.splitlines()) + 1
    c, report = started(pg_factory)
    pool = {k["knob"]: k for k in report["plan"]["boot"]}["pool.2048"]
    assert pool["at_boot"] == "37" and pool["source"] == f"/etc/sysctl.conf:{n}"
    [f] = [f for f in report["findings"] if f["code"] == "boot.overridden"]
    assert f["severity"] == "crit" and f"/etc/sysctl.conf:{n}" in f["rationale"]
    r = run_cli("apply", "--db", "postgres", "--instance", str(c.port), "--yes",
                "--journal-dir", str(tmp_path / "journal"))
    assert r.returncode == 2 and "/etc/sysctl.conf" in r.stderr, r.stdout + r.stderr
    assert not os.path.exists("/etc/sysctl.d/60-hpadvise.conf")
    knobs.pool(2048, 0)
    assert system_files.replay().returncode == 0
    assert Path(POOL).read_text().strip() == "37"  # what check said the next boot gives


@pytest.fixture
def tuned_host(knobs):
    """TuneD as Debian installs it, its /etc/tuned put back exactly afterwards."""
    if not shutil.which("tuned"):
        pytest.fail("tuned not found: run scripts/test.sh, which installs it")
    import tempfile
    keep = Path(tempfile.mkdtemp(prefix="hpadvise-tuned-")) / "tuned"
    shutil.copytree("/etc/tuned", keep, symlinks=True)
    run_existed = os.path.isdir("/run/tuned")
    try:
        yield
    finally:
        shutil.rmtree("/etc/tuned")
        shutil.copytree(keep, "/etc/tuned", symlinks=True)
        shutil.rmtree(keep.parent)
        if not run_existed:
            shutil.rmtree("/run/tuned", ignore_errors=True)


@pytest.mark.parametrize("units", [
    "[vm]\ntransparent_hugepages=never\n"
    "[sysfs]\n/sys/kernel/mm/transparent_hugepage/defrag=never\n",
    # defrag set twice, the [sysfs] unit first: TuneD applies [vm] after it, so a child that
    # overrode defrag in [sysfs] alone would be undone by the parent's [vm]
    "[sysfs]\n/sys/kernel/mm/transparent_hugepage/defrag=never\n[vm]\n"
    "transparent_hugepages=never\ntransparent_hugepage.defrag=never\n",
], ids=["vm-then-sysfs", "sysfs-then-vm"])
def test_tuned_child_profile_applied_by_the_real_tuned_gives_the_plan(
        tuned_host, system_files, knobs, pg_factory, tmp_path, units):
    # a database profile as vendors ship them: THP off, defrag off
    parent = Path("/etc/tuned/hpadvise-test-db")
    parent.mkdir()
    (parent / "tuned.conf").write_text("[main]\nsummary=test database profile\n" + units)
    Path("/etc/tuned/active_profile").write_text("hpadvise-test-db\n")
    c, report = started(pg_factory)
    view = {k["knob"]: k for k in report["plan"]["boot"]}
    assert view["thp.enabled"]["at_boot"] == "never"
    assert "hpadvise-test-db/tuned.conf" in view["thp.enabled"]["source"]
    with applied(c, tmp_path) as out:
        assert out["next_boot"] == [], out["next_boot"]
        child = Path("/etc/tuned/hpadvise/tuned.conf").read_text()
        assert "include=hpadvise-test-db" in child
        assert Path("/etc/tuned/active_profile").read_text().strip() == "hpadvise"
        planned = {k["knob"]: k["plan"] for k in json.loads(
            run_cli("check", "--json", "--db", "postgres").stdout)["plan"]["boot"]}
        report, _ = check_json("--db", "postgres")
        after = {k["knob"]: k for k in report["plan"]["boot"]}
        for knob in ("thp.enabled", "thp.defrag", "thp.shmem_enabled"):
            assert after[knob]["at_boot"] == planned[knob], (knob, after[knob])
            assert "/etc/tuned/hpadvise/tuned.conf" in after[knob]["source"]
        # TuneD starts (no daemon: it applies the active profile and exits) over a host whose
        # knobs are all wrong: it must set exactly the plan
        for knob in ("enabled", "defrag", "shmem_enabled"):
            knobs.set(f"/sys/kernel/mm/transparent_hugepage/{knob}", "always")
        main = Path("/etc/tuned/tuned-main.conf")
        main.write_text(main.read_text().replace("daemon = 1", "daemon = 0"))
        system_files.save()  # the sysctls TuneD's reapply_sysctl may set
        t = subprocess.run(["tuned", "--no-dbus", "--profile", "hpadvise"],
                           capture_output=True, text=True, timeout=120)
        assert t.returncode == 0, t.stdout + t.stderr
        for knob in ("enabled", "defrag", "shmem_enabled"):
            now = Path(f"/sys/kernel/mm/transparent_hugepage/{knob}").read_text()
            assert f"[{planned['thp.' + knob]}]" in now, (knob, now)
    assert Path("/etc/tuned/active_profile").read_text().strip() == "hpadvise-test-db"
    assert not Path("/etc/tuned/hpadvise/tuned.conf").exists()
    assert out["status"] == "ok"
