"""The thread stack rule under THP enabled=always, on JDK trees made here: the stack size from
-Xss / -XX:ThreadStackSize or the architecture's default, the mitigation from libjvm.so."""

import pytest

from hpadvise.plugins.jvm.flags import JvmFlags
from hpadvise.plugins.jvm.thp import stack_mitigation, stack_risk

MiB = 1 << 20


def _jdk(tmp_path, mitigated: bool, arch: str = "x86_64"):
    home = tmp_path / f"jdk-{arch}-{mitigated}"
    (home / "lib/server").mkdir(parents=True)
    (home / "lib/server/libjvm.so").write_bytes(
        b"\x7fELF" + b"\0" * 4096 + (b"THPStackMitigation\0" if mitigated else b"UseLargePages\0"))
    (home / "release").write_text(f'JAVA_VERSION="11.0.13"\nOS_ARCH="{arch}"\n')
    return home


@pytest.mark.parametrize("args, stack", [
    (["-Xss2m"], 2 * MiB), (["-XX:ThreadStackSize=4096"], 4 * MiB),
    (["-Xss512k", "-Xss3m"], 3 * MiB), ([], None)])
def test_stack_size_from_the_command_line(args, stack):
    f = JvmFlags()
    for a in args:
        f.apply(a)
    assert f.stack == stack


def test_mitigation_read_from_libjvm(tmp_path):
    assert stack_mitigation(str(_jdk(tmp_path, True))) is True
    assert stack_mitigation(str(_jdk(tmp_path, False))) is False
    assert stack_mitigation(str(tmp_path / "none")) is None


def test_risk_only_for_large_stacks_on_a_jdk_without_the_mitigation(tmp_path):
    old, new = _jdk(tmp_path, False), _jdk(tmp_path, True)
    release = (old / "release").read_text()
    risk = stack_risk(2 * MiB, 11, release, str(old), 2048)
    assert risk and "-Xss 2 MiB" in risk and "JDK 11" in risk
    assert stack_risk(2 * MiB, 21, release, str(new), 2048) is None  # mitigated
    assert stack_risk(None, 11, release, str(old), 2048) is None  # x86-64 default: 1 MiB
    assert stack_risk(2 * MiB, 11, release, str(old), None) is None  # no THP on this host
    arm = _jdk(tmp_path, False, "aarch64")  # AArch64's default was 2 MiB
    assert "the default 2 MiB" in stack_risk(None, 17, (arm / "release").read_text(),
                                             str(arm), 2048)


def test_jdk_25_0_0_g1_heap_off_thp_under_madvise_is_explained():
    """JDK-8366434: only the first JDK 25 release, only G1, only under enabled = madvise."""
    from hpadvise.plugins.jvm.thp import g1_madvise_bug
    r25 = 'JAVA_VERSION="25"\nOS_ARCH="x86_64"\n'
    assert "JDK-8366434" in g1_madvise_bug(r25, "G1", "madvise")
    assert g1_madvise_bug('JAVA_VERSION="25.0.0"', "G1", "madvise")
    assert g1_madvise_bug('JAVA_VERSION="25.0.2"', "G1", "madvise") is None  # fixed
    assert g1_madvise_bug(r25, "G1", "always") is None  # always is the workaround
    assert g1_madvise_bug(r25, "Z", "madvise") is None
    assert g1_madvise_bug('JAVA_VERSION="21.0.5"', "G1", "madvise") is None
    assert g1_madvise_bug(None, "G1", "madvise") is None
