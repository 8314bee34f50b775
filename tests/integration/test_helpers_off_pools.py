"""The throwaway PostgreSQL processes hpadvise runs (size's initdb, a scratch cluster's) take
no page of the host's pools, which may hold a stopped cluster's pages: a free page they took
would fail that cluster's start with `huge_pages = on`. The same initdb run plainly beside the
same pool takes pages, so the sampler sees what it looks for."""

import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from support import pg_bindir, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]

FREE = 100  # 200 MiB: more than initdb's backends map (128MB of buffers by default)
POOL = Path("/sys/kernel/mm/hugepages/hugepages-2048kB")


def taken_while(work) -> tuple[int, int]:
    """The most pages of the 2 MiB pool reserved and the fewest free, read every 5 ms while
    `work()` runs."""
    seen, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            seen.append((int((POOL / "resv_hugepages").read_text()),
                         int((POOL / "free_hugepages").read_text())))
            time.sleep(0.005)
    t = threading.Thread(target=sample)
    t.start()
    try:
        work()
    finally:
        stop.set()
        t.join()
    return max(r for r, _ in seen), min(f for _, f in seen)


def plain_initdb() -> None:
    with tempfile.TemporaryDirectory(prefix="plain-initdb-") as d:
        shutil.chown(d, "postgres")
        r = subprocess.run([f"{pg_bindir()}/initdb", "-D", f"{d}/data", "-N", "-A", "trust"],
                           capture_output=True, text=True, user="postgres", cwd="/")
        assert r.returncode == 0, r.stderr


def test_size_and_a_scratch_cluster_take_no_page_of_the_pool(knobs, pg_factory):
    assert knobs.pool(2048, FREE) == FREE
    rsvd, free = taken_while(plain_initdb)
    assert rsvd > 0 or free < FREE, "a plain initdb took no page: the check below proves nothing"

    def size():
        r = run_cli("size", "postgres", "shared_buffers=1GB", "--json")
        assert r.returncode == 0, r.stderr
    assert taken_while(size) == (0, FREE)
    assert taken_while(pg_factory) == (0, FREE)  # initdb into a scratch directory
