"""The host as one resource the tests take in turn.

Most tests own the host while they run: they change pools, THP or sysctl, make cgroups, or
start servers that every `check` on this host sees. Those take the host's lock for the whole
test (an exclusive flock on LOCK, whichever worker runs them), and the host must be as they
found it when they end: pools, THP knobs, cgroups, /etc/sysctl.d, hugetlbfs and cgroup mounts.
The contained tests (CONTAINED: the unit tests, and what runs only on captured trees, in a
root's private namespaces, in a scratch directory or in a guest whose QEMU no check counts)
take no lock and may run beside them in a second worker, at a lower CPU priority:
scripts/test.sh runs pytest-xdist with two, and its scheduler (conftest.py) gives every test
that owns the host to one worker, in file order, as one unit of work. Free memory is a second
resource (MEMORY_LOCK): a guest beside takes gigabytes of it, and a test of the host's that
takes it all for a moment (a pool as large as free memory) waits for the guest to end, and
the guest for it. 1 GiB pages need no such wait: with the two-node guest running (3.4 GiB of
its 6 GiB touched), the kernel granted 3 of 3 at runtime in 13 tries out of 13.
"""

from __future__ import annotations

import fcntl
import glob
import os
from pathlib import Path

# The tests that touch nothing of the host's, by node id prefix: the one list both the
# collection (which marks them `contained`) and the scheduler read, since the scheduler sees
# node ids only
CONTAINED = (
    "tests/unit/",
    "tests/integration/test_python39.py::test_the_unit_tests_pass_on_python_39",
    "tests/integration/test_python39.py::test_the_archive_is_built_as_readme_says",
    "tests/integration/test_ansible.py::test_module_documentation_parses",
    "tests/integration/test_ansible.py::test_collection_passes_ansible_test_sanity",
    "tests/integration/test_pyz.py::test_the_same_report_as_installed",
    "tests/integration/test_pyz.py::test_what_it_reads_from_inside_the_archive",
    "tests/integration/test_pyz.py::test_it_unpacks_once_into_a_private_cache",
    "tests/integration/test_browser.py::",
    "tests/integration/test_promtool.py::",
    "tests/integration/test_guest_image.py::",
    "tests/integration/test_numa_guest.py::",
    "tests/integration/test_doc_examples.py::test_the_examples_were_found",
    "tests/integration/test_doc_examples.py::test_every_example_parses",
)


def contained(nodeid: str) -> bool:
    return nodeid.startswith(CONTAINED)


# Contained tests whose module fixture is dear (a guest booted once for all of them): one unit
# of work, so that one worker runs them all and the fixture runs once
ONE_UNIT = ("tests/integration/test_numa_guest.py",)


def scope(nodeid: str) -> str:
    """The scheduler's unit of work: the host's tests as one, a dear module as one, else the
    test."""
    if not contained(nodeid):
        return "the host"
    module = nodeid.split("::")[0]
    return module if module in ONE_UNIT else nodeid


# Contained units that go out after all the others: the two-node guest holds the memory lock
# for 2-3 minutes, and the host's tests that take all free memory run 3-4 minutes into the
# suite (test_gigantic_live.py) and near its end (test_validate_pages.py). Run last beside
# the host's tests, the guest falls between them (the lock, not this order, keeps them apart).
LAST = ("tests/integration/test_numa_guest.py",)


def rank(unit: str) -> int:
    """Where a unit of work goes out: the host's first, LAST ones last, the rest between."""
    return 0 if unit == "the host" else 2 if unit in LAST else 1


LOCK = "/run/hpadvise-tests.lock"
# The host's free memory as one resource: a contained test that takes gigabytes of it (a guest
# of 6 GiB) holds this lock while it does, and so do the host's tests that take all free memory
# for a moment (gigantic.NoGiganticPages fills it with a pool, then takes ranges offline)
MEMORY_LOCK = "/run/hpadvise-tests-memory.lock"
# set where tests run beside the host's own without an xdist worker's name (the unit tests
# under Python 3.9 in a root): contained tests there are not held to the host's account
BESIDE = "HPADVISE_TESTS_BESIDE_HOST"
THP = "/sys/kernel/mm/transparent_hugepage"
SYSCTL_D = "/etc/sysctl.d"


def _cgroup2_root() -> str | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            return left.split()[4]
    return None


def state() -> dict[str, str]:
    """What a test must leave as it found it, path -> what it held."""
    s: dict[str, str] = {}
    for p in sorted(glob.glob("/sys/kernel/mm/hugepages/*/nr_hugepages")
                    + glob.glob("/sys/devices/system/node/node*/hugepages/*/nr_hugepages")):
        s[p] = Path(p).read_text().strip()
    for p in [f"{THP}/{k}" for k in ("enabled", "defrag", "shmem_enabled")] \
            + sorted(glob.glob(f"{THP}/hugepages-*kB/*enabled")):
        s[p] = Path(p).read_text().strip()
    from hpadvise.facts.sysctls import PLANNED  # the settings a plan may change
    for d in PLANNED:
        if os.path.exists(d.path):
            s[d.path] = Path(d.path).read_text().strip()
    root = _cgroup2_root()
    if root:
        s[f"{root}/cgroup.subtree_control"] = Path(f"{root}/cgroup.subtree_control"
                                                   ).read_text().strip()
        s[f"{root} child cgroups"] = " ".join(sorted(
            e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False)))
    s[SYSCTL_D] = " ".join(sorted(os.listdir(SYSCTL_D))) if os.path.isdir(SYSCTL_D) else ""
    s["mounts (hugetlbfs, cgroup)"] = " ".join(sorted(
        line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.partition(" - ")[2].split()[:1] in (["hugetlbfs"], ["cgroup"])))
    return s


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return [f"{k}: {before.get(k)!r} -> {after.get(k)!r}"
            for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]


class Held:
    """A lock (the host's unless told), held from enter to exit (blocks while another worker
    holds it)."""

    def __init__(self, path: str = LOCK):
        self.path = path

    def __enter__(self) -> "Held":
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


_memory: list[Held] = []


def hold_memory() -> None:
    """Hold the memory lock from now to the end of the running test (the host_lock fixture lets
    it go): for a test about to take all free memory, which a guest running beside needs."""
    if not _memory:
        _memory.append(Held(MEMORY_LOCK).__enter__())


def release_memory() -> None:
    while _memory:
        _memory.pop().__exit__()
