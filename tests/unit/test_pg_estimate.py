"""The per-major shared memory estimate (sizing.estimate_bytes) against figures PostgreSQL's own
binaries gave for the same settings (`postgres -C shared_memory_size`, MB rounded up; the lab's
pg_shmem_fit.py, recorded in docs/reference.md), and the terms each major gets."""

import pytest

from hpadvise.plugins.postgres import sizing as pgsizing
from hpadvise.plugins.postgres.conf import DEFAULTS

MiB = 1 << 20

# (major, settings, the server's own shared_memory_size in MB), measured with 15 (Debian),
# 16.2 and 18.6 on settings the fit did not see (pg_shmem_fit.py --check).
SEEN = [
    (15, {"shared_buffers": "256MB", "max_connections": "2000", "max_locks_per_transaction": "1024",
          "max_worker_processes": "16", "max_prepared_transactions": "10"}, 1090),
    (16, {"shared_buffers": "6GB", "max_connections": "2000", "max_locks_per_transaction": "1024",
          "max_worker_processes": "16", "max_prepared_transactions": "10"}, 7113),
    (18, {"shared_buffers": "256MB", "max_connections": "2000", "max_locks_per_transaction": "1024",
          "max_worker_processes": "16", "max_prepared_transactions": "10"}, 1177),
    (18, {"shared_buffers": "2GB", "max_connections": "2000", "max_locks_per_transaction": "1024",
          "max_worker_processes": "16", "max_prepared_transactions": "10"}, 3084),
    (18, {}, 150),
    (15, {}, 143),
]


def _est(major, over, io_method="worker"):
    return pgsizing.estimate_bytes(pgsizing.estimate_values({**DEFAULTS, **over}), major,
                                   io_method)


@pytest.mark.parametrize("major,over,server_mb", SEEN)
def test_never_below_the_server_and_close_to_it(major, over, server_mb):
    est = _est(major, over)
    assert server_mb * MiB <= est <= server_mb * MiB + 60 * MiB, (est / MiB, server_mb)


def test_terms_per_major():
    assert pgsizing.shmem_terms(13) is pgsizing.shmem_terms(15)
    assert pgsizing.shmem_terms(25) is pgsizing.shmem_terms(18)
    t17 = pgsizing.shmem_terms(17)
    for f in ("fixed", "per_buffer", "per_slot", "per_lock", "margin"):
        assert getattr(t17, f) >= getattr(pgsizing.shmem_terms(16), f)
        assert getattr(t17, f) >= getattr(pgsizing.shmem_terms(18), f)
    # without its AIO term (136 backend slots + 38 auxiliary, 64 handles each at 128 MB of
    # buffers) 18's estimate would be short of 18's own 150 MB at the defaults
    t18 = pgsizing.shmem_terms(18)
    aio = t18.per_aio * (136 + 38) * 64
    assert _est(18, {}) - aio < 150 * MiB <= _est(18, {})


def test_io_uring_rings():
    # 64 entries: 4 KiB of submission entries, 64 + 2 KiB + 256 B of rings: two pages
    assert pgsizing.io_uring_ring_bytes(64) == 8192
    assert pgsizing.io_uring_ring_bytes(14) == 8192      # rounded up to 16 entries
    assert pgsizing.io_uring_ring_bytes(128) == 16384
    worker, uring = _est(18, {}), _est(18, {}, "io_uring")
    # defaults: 100 + 16 + 2 + 8 + 10 backend slots (18 counts autovacuum_worker_slots) and
    # 38 auxiliary, less the 32 I/O workers
    assert uring - worker == 4096 + (136 + 38 - 32) * 8192
    # before 18 there is no io_uring method
    assert _est(17, {}, "io_uring") == _est(17, {})
    # io_max_concurrency set: the handles and rings follow it
    assert _est(18, {"io_max_concurrency": "8"}) < worker


def test_18_counts_autovacuum_worker_slots_not_max_workers():
    """18 reserves autovacuum_worker_slots (default 16) + 2 (launcher, slot sync worker) in
    MaxBackends: 100 + 16 + 2 + 8 + 10 = 136 at the defaults, which is 174 with the 38
    auxiliary processes, the semaphores 18 asks for; autovacuum_max_workers only caps how many
    of those slots run. Before 18, autovacuum_max_workers + 1 (the launcher)."""
    vals = pgsizing.estimate_values(dict(DEFAULTS))
    assert pgsizing.autovacuum_slots(vals, 18) == 18
    assert pgsizing.autovacuum_slots(vals, 17) == pgsizing.autovacuum_slots(vals, None) == 4
    assert pgsizing.autovacuum_slots({**vals, "autovacuum_worker_slots": 64}, 25) == 66
    base = _est(18, {})
    assert _est(18, {"autovacuum_max_workers": "10"}) == base
    assert _est(18, {"autovacuum_worker_slots": "16"}) == base
    more = _est(18, {"autovacuum_worker_slots": "64"})
    t = pgsizing.shmem_terms(18)
    per_slot = t.per_slot + 1.01 * t.per_lock * 64  # 64 locks per transaction by default
    assert more - base >= int(48 * per_slot)
    # before 18 the workers' count decides, and autovacuum_worker_slots means nothing
    assert _est(16, {"autovacuum_max_workers": "10"}) > _est(16, {})
    assert _est(16, {"autovacuum_worker_slots": "64"}) == _est(16, {})
