"""The benchmarks validate can run, declared once, and the protocol their drivers implement.

The runner reads these declarations (how much data one unit of scale is, which workloads a
benchmark offers, whether it writes per-transaction logs, what it needs installed) and calls
the driver through `Driver`; it never names a benchmark. An engine's BenchTarget makes the
driver for its server (target.driver) and lists its benchmarks in `Engine.benches`.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Iterable, Protocol


class Driver(Protocol):
    """One benchmark client against one server (pgbench.Pgbench, sysbench.Sysbench)."""

    def start(self, workload: str, clients: int, seconds: int, logprefix: str | None,
              warm_s: int = 0) -> subprocess.Popen:
        """Start warm_s seconds of warm-up then `seconds` measured, in a session of its own."""

    def stream(self, proc: subprocess.Popen) -> Iterable[str]:
        """The pipe its per-second progress lines come on."""

    def live_tps(self, line: str) -> float | None:
        """The TPS of one progress line, or None."""

    def finish(self, proc: subprocess.Popen, logprefix: str | None, lines: list[str],
               warm_s: int = 0):
        """Wait for it and parse its figures over the measured part (a Run)."""


@dataclass(frozen=True)
class Benchmark:
    name: str
    # The workloads it offers (`--workload`); the first is its default. A benchmark with one
    # workload of its own lists just that.
    workloads: tuple[str, ...]
    describe: tuple[tuple[str, str], ...]  # workload -> what it stresses, for the report
    mb_per_unit: int  # data per unit of scale, loaded (for the default scale and disk check)
    unit: str  # what the scale counts ("scale", "warehouses")
    logs: bool  # writes per-transaction logs (percentiles) into a directory of the server's
    needs: tuple[str, str] | None = None  # (executable, Debian package) that must be installed
    rate: str = "TPS"  # what a run's figure counts per second, as the report names it
    # what its driver does before the runs where it loads no data of its own (a replay)
    prepares: str = ""
    # workload -> (the most clients one unit of scale serves, the rows more would queue on):
    # validate's default clients per server stay within it (budget.clients_for), so that a
    # run measures the memory huge pages change, not a queue for the same few rows
    contended: tuple[tuple[str, int, str], ...] = ()
    # the workload that isolates the memory effect huge pages have, which the report offers
    # when a run of another one could not decide ("" where it has none)
    isolates: str = ""

    def loading(self, scale: int) -> str:
        """The progress line while the driver is made: scale 0 is the user's copied data,
        which nothing loads."""
        if self.prepares:
            return self.prepares
        if scale == 0:
            return f"preparing {self.name} on the copied data"
        return f"loading {self.name} data ({self.unit} {scale})"

    def about(self, workload: str) -> str:
        return dict(self.describe).get(workload, "")


BENCHMARKS = {b.name: b for b in (
    # pgbench scale 1 is ~15 MiB of tables and indexes (scale 400 measured ~6 GB,
    # docs/reference.md).
    # TPC-B first: what users mean by "pgbench"; select-only is one option away.
    Benchmark("pgbench", ("tpcb", "select"), (
        ("select", "select-only: reads through the buffers, which isolates the memory "
                   "effect huge pages have"),
        ("tpcb", "TPC-B (pgbench's default script): updates with WAL and fsync as well, "
                 "where the huge page effect is diluted; --workload select isolates it")),
        15, "scale", True,
        # pgbench's documentation, "Good Practices": pgbench_branches holds one row per unit
        # of scale and every TPC-B transaction updates one of them, so with more clients
        # than the scale a run mostly measures update contention
        contended=(("tpcb", 1, "pgbench_branches' rows, one per unit of scale"),),
        isolates="select"),
    # One TPC-C warehouse with its share of ITEM is ~100 MiB loaded (TPC-C 5.11 clause 4.2.2
    # puts it near 70 MiB of rows; measured here with indexes: ~95 MiB on MariaDB and
    # PostgreSQL).
    Benchmark("tpcc", ("tpcc",), (
        ("tpcc", "TPC-C (hpadvise's sysbench script): new orders, payments, deliveries"),),
        100, "warehouses", False, ("sysbench", "sysbench")),
    # A replay of a captured statement log (--replay): the user's own statements on a copy
    # of the user's own data; its size is the copy's, not a scale.
    Benchmark("replay", ("replay",), (
        ("replay", "a replay of a captured statement log: the user's own statements, each "
                   "run one replay of the whole log on data as it was before it"),),
        0, "", False, ("pgreplay", "pgreplay"), "statements/s",
        "parsing the statement log for pgreplay (its replay file)"),
)}


def resets(driver) -> bool:
    """Whether the driver's runs need the data reset before each (a replay's do): its run is
    a fixed amount of work that ends when the work does, not at a time."""
    return bool(getattr(driver, "resets", False))
