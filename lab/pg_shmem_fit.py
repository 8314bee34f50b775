"""How far the estimate of PostgreSQL's shared memory is from each major's own figure.

For each PostgreSQL binary given (`MAJOR=BINDIR`), initdb a scratch cluster as the postgres user,
ask `postgres -C shared_memory_size` (MB, the server's own computation) over a grid of the
settings the estimate reads, and print the estimate beside it. The per-major terms in
plugins/postgres/sizing.py come from this table: run it again when a major is added.

    python lab/pg_shmem_fit.py [--check] 15=/usr/lib/postgresql/15/bin 18=/path/to/pginstall/bin

Touches no pool, THP or cgroup: it only runs `postgres -C` on stopped scratch clusters under
a temporary directory, removed at the end.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

from hpadvise.plugins.postgres.conf import DEFAULTS
from hpadvise.plugins.postgres.sizing import estimate_bytes, estimate_values

GRID = {
    "shared_buffers": ["128MB", "1GB", "4GB"],
    "max_connections": ["100", "500", "1000"],
    "max_locks_per_transaction": ["64", "256"],
    "max_worker_processes": ["8", "64"],
    "max_prepared_transactions": ["0", "100"],
}
# Other values than the fit saw, to test it between and beyond its points (--check).
CHECK = {
    "shared_buffers": ["256MB", "2GB", "6GB"],
    "max_connections": ["50", "250", "2000"],
    "max_locks_per_transaction": ["32", "128", "1024"],
    "max_worker_processes": ["16"],
    "max_prepared_transactions": ["10"],
}


def as_postgres(cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["su", "postgres", "-c", cmd], capture_output=True, text=True,
                          cwd="/tmp")


def estimate(major: int, over: dict[str, str]) -> int:
    return estimate_bytes(estimate_values({**DEFAULTS, **over}), major)


def main(args: list[str]) -> None:
    grid = GRID
    if args and args[0] == "--check":
        grid, args = CHECK, args[1:]
    with tempfile.TemporaryDirectory(prefix="hpadvise-shmem-") as tmp:
        Path(tmp).chmod(0o755)
        print("major,setting,server_MB,estimate_MB,estimate_minus_server_MB")
        for spec in args:
            major, bindir = spec.split("=", 1)
            data = Path(tmp) / major
            data.mkdir()
            subprocess.run(["chown", "postgres", str(data)], check=True)
            r = as_postgres(f"{bindir}/initdb -D {data}/d")
            if r.returncode:
                sys.exit(f"initdb {major} failed: {r.stderr[-300:]}")
            for combo in itertools.product(*grid.values()):
                over = dict(zip(grid, combo))
                cs = " ".join(f"-c {k}={v}" for k, v in over.items())
                r = as_postgres(f"{bindir}/postgres -C shared_memory_size -D {data}/d {cs}")
                if r.returncode:
                    sys.exit(f"postgres -C {major} {cs}: {r.stderr[-300:]}")
                server = int(r.stdout.strip())
                est = estimate(int(major), over) / (1 << 20)
                label = ";".join(f"{k}={v}" for k, v in over.items())
                print(f"{major},{label},{server},{est:.1f},{est - server:+.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
