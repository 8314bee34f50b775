"""The machine's OpenJDK on exactly the pool hpadvise computes: no warning, the heap on
hugetlb, every page used; THP under madvise; and the flag sources and bad flags it must read."""

import os
from pathlib import Path

import pytest

from support import check_json, run_cli

pytestmark = pytest.mark.integration


def _jvm(report, pid):
    return next(i for i in report["instances"] if i["id"] == f"jvm:{pid}")


def _used():
    m = {ln.split(":")[0]: int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
         if ln.startswith("HugePages_")}
    return m["HugePages_Total"] - m["HugePages_Free"] + m["HugePages_Rsvd"]


@pytest.mark.parametrize("flags", [("-Xmx256m", "-Xms256m"),
                                   ("-Xmx1g", "-Xms1g", "-XX:+UseParallelGC"),
                                   ("-Xmx512m", "-Xms512m", "-XX:-TieredCompilation")])
def test_large_pages_on_exactly_the_computed_pool(java, knobs, flags):
    knobs.pool(2048, 0)
    p = java(*flags)
    report, r = check_json("--db", "jvm")
    assert r.returncode == 0, r.stderr
    i = _jvm(report, p.pid)
    assert i["backing"] == "4k" and i["demand"]["exact"]
    n = i["demand"]["pages"]["2048"]
    codes = {f["code"] for f in report["findings"] if f["instance"] == i["id"]}
    assert "jvm.huge_pages.none" in codes
    p.kill()
    p.wait()
    assert knobs.pool(2048, n) == n
    q = java("-XX:+UseLargePages", *flags)
    assert "warning" not in q.first.lower(), q.first  # no "UseLargePages disabled" etc.
    assert _used() == n, f"computed {n}, the JVM took {_used()}"
    report, _ = check_json("--db", "jvm")
    i = _jvm(report, q.pid)
    assert i["backing"] == "hugetlb"
    codes = {f["code"] for f in report["findings"] if f["instance"] == i["id"]}
    assert "jvm.large_pages.active" in codes and "jvm.large_pages.fallback" not in codes
    q.kill()
    q.wait()
    # one page short: the JVM starts anyway and check catches it
    assert knobs.pool(2048, n - 1) == n - 1
    s = java("-XX:+UseLargePages", *flags)
    report, _ = check_json("--db", "jvm")
    fb = [f for f in report["findings"] if f["instance"] == f"jvm:{s.pid}"
          and f["code"] == "jvm.large_pages.fallback"]
    assert fb and fb[0]["severity"] == "crit"


def test_thp_under_madvise(java, knobs):
    knobs.set("/sys/kernel/mm/transparent_hugepage/enabled", "madvise")
    p = java("-XX:+UseTransparentHugePages", "-Xmx256m", "-Xms256m", "-XX:+AlwaysPreTouch")
    report, _ = check_json("--db", "jvm")
    i = _jvm(report, p.pid)
    assert i["backing"] == "thp"
    assert any(f["code"] == "jvm.thp.active" for f in report["findings"]
               if f["instance"] == i["id"])
    # a JVM on THP needs no pool: it adds nothing to the plan's pages
    assert not report["plan"]["pools"] or all(i["id"] not in pp["instances"]
                                              for pp in report["plan"]["pools"])


def test_flag_sources_and_bad_flags(java, tmp_path):
    argfile = tmp_path / "jvm.args"
    argfile.write_text("# options from a file\n-XX:+UseTransparentHugePages\n-Xms96m\n")
    os.chmod(tmp_path, 0o755)
    p = java(f"@{argfile}", env={"JDK_JAVA_OPTIONS": "-Xmx300m", "JAVA_TOOL_OPTIONS": "-Xmx200m"})
    q = java("-XX:+UseLargePages", "-XX:-UseLargePages", "-Xmx64g", "-Xms16m")
    # HotSpot reads _JAVA_OPTIONS after the command line: it wins
    o = java("-Xmx128m", env={"_JAVA_OPTIONS": "-Xmx160m"})
    report, r = check_json("--db", "jvm")
    assert r.returncode == 0, r.stderr
    i = _jvm(report, p.pid)
    # JAVA_TOOL_OPTIONS < JDK_JAVA_OPTIONS < command line (with @argfiles)
    assert i["settings"]["heap_max"] == "300 MiB" and i["settings"]["heap_min"] == "96 MiB"
    assert i["settings"]["UseTransparentHugePages"] is True
    # and where each winning value came from
    assert i["settings"]["sources"] == {"UseTransparentHugePages": f"@{argfile}",
                                        "-Xmx": "JDK_JAVA_OPTIONS"}, i["settings"]
    k = _jvm(report, o.pid)
    assert k["settings"]["heap_max"] == "160 MiB", k["settings"]
    assert k["settings"]["sources"]["-Xmx"] == "_JAVA_OPTIONS"
    j = _jvm(report, q.pid)
    codes = {f["code"] for f in report["findings"] if f["instance"] == j["id"]}
    assert {"jvm.flags.contradictory", "jvm.heap.larger_than_ram"} <= codes
    assert j["settings"]["UseLargePages"] is False  # the last one wins
    # as another user: no environ, no smaps, but no crash either
    r = run_cli("check", "--db", "jvm", "--json", user="nobody")
    assert r.returncode == 0, r.stderr


def test_apply_prints_flags_and_reserves(java, knobs, tmp_path):
    knobs.pool(2048, 0)
    p = java("-Xmx256m", "-Xms128m")
    env = {"HPADVISE_JOURNAL_DIR": str(tmp_path / "j")}
    r = run_cli("apply", "--db", "jvm", "--instance", f"jvm:{p.pid}", "--profile", "jvm",
                "--yes", "--no-persist", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "-XX:+UseLargePages" in r.stdout and "-Xms256m" in r.stdout
    assert "JDK_JAVA_OPTIONS" in r.stdout
    n = int(Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text())
    assert n > 256 // 2
    r = run_cli("rollback", "--yes", env=env)
    assert r.returncode == 0
    assert int(Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text()) == 0
    # -XX:-UseLargePages on the command line outranks JDK_JAVA_OPTIONS: the advice says to
    # change it where it is, not to add the flag where it would not take
    q = java("-Xmx256m", "-Xms256m", "-XX:-UseLargePages")
    r = run_cli("apply", "--db", "jvm", "--instance", f"jvm:{q.pid}", "--profile", "jvm",
                "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "UseLargePages comes from the command line" in r.stdout, r.stdout
