import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import KernelKnobs, PgCluster, pg_bindir  # noqa: E402

HOSTS = Path(__file__).resolve().parent / "fixtures" / "hosts"


@pytest.fixture(scope="session", autouse=True)
def machine_left_as_found():
    """Whatever a test does, the session ends with every pool and THP knob as it began."""
    k = KernelKnobs() if KernelKnobs.writable() else None
    yield
    if k:
        k.restore()


@pytest.fixture
def hosts() -> Path:
    return HOSTS


@pytest.fixture
def knobs():
    """Live kernel knobs, restored in teardown whatever happens. Skips (with the reason) where
    the process is not root or the knobs are not writable."""
    if not KernelKnobs.writable():
        pytest.skip("live kernel test: needs root and writable /proc/sys/vm/nr_hugepages")
    k = KernelKnobs()
    try:
        yield k
    finally:
        k.restore()


@pytest.fixture
def my_factory():
    """Throwaway MariaDB servers (never the system's service), destroyed in teardown."""
    from hpadvise.benchmarks.scratch import ScratchMaria, maria_bindir
    if maria_bindir() is None:
        pytest.fail("MariaDB server binaries not found: run scripts/test.sh, which installs them")
    if os.geteuid() != 0:
        pytest.skip("integration: needs root (servers run as the mysql user)")
    made: list = []

    def make(settings=None):
        m = ScratchMaria(settings)
        made.append(m)
        return m

    try:
        yield make
    finally:
        for m in made:
            m.destroy()


@pytest.fixture
def pg_factory():
    """Throwaway PostgreSQL clusters (never the system's service), destroyed in teardown."""
    if pg_bindir() is None:
        pytest.fail("PostgreSQL server binaries not found: run scripts/test.sh, which installs them")
    if os.geteuid() != 0 and os.environ.get("USER") != "postgres":
        pytest.skip("integration: needs root (clusters run as the postgres user)")
    made: list[PgCluster] = []

    def make(settings=None) -> PgCluster:
        c = PgCluster(settings)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.destroy()
