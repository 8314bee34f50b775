"""The choice of a validate run's design: restart, resident or simultaneous, and the THP
phases a side-by-side run takes turns in (docs/design.md, "Validating")."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from hpadvise.api.face import InputError

from .variants import host_wide, phases_for

if TYPE_CHECKING:
    from .options import Options

DESIGNS = ("auto", "restart", "resident", "simultaneous")
# What "auto" picks where the variants allow it: the design with the narrowest CI in the
# side-by-side series in lab/README.md ("Designs of a validate run").
AUTO_DESIGN = "simultaneous"


def choose_design(o: Options, target, buffers: int, avail: int | None
                  ) -> tuple[str, str, list[str]]:
    """The design to run, what chose it (explained() adds the phases), and its THP phases
    (variants.phases_for: THP variants as
    phases of a side-by-side run, so that the comparisons between per-server variants still
    run side by side). Restart wherever the others cannot measure the variants: host-wide
    knobs with no side-by-side comparison to keep, a real instance, too few CPUs or too
    little memory (`avail`: MemAvailable in kB before anything changed, None unknown)."""
    if o.design not in DESIGNS:
        raise InputError(f"unknown design {o.design!r}; choose from {', '.join(DESIGNS)}")
    if o.design == "restart":
        return "restart", "asked for", []
    want = AUTO_DESIGN if o.design == "auto" else o.design
    phases = phases_for(o.variants)
    servers = [v for v in o.variants if not host_wide(v)] if phases else o.variants
    n = len(servers)
    host = [v for v in o.variants if host_wide(v)]
    why = None
    if host and not phases:
        why = (f"{', '.join(host)} change{'s' if len(host) == 1 else ''} host-wide THP "
               "knobs and no comparison of per-server settings with current runs beside "
               "them, so every variant needs the host to itself")
    elif o.instance and not o.copy:  # copies of it can be doubled
        why = "--instance measures one running server, which cannot be doubled"
    elif isinstance(blocker := target.twin_blocker(), str):
        why = blocker
    elif want == "simultaneous" and n > len(os.sched_getaffinity(0)):
        why = f"{n} servers ({', '.join(servers)}) need {n} CPUs to run side by side; " \
              f"this host gives us {len(os.sched_getaffinity(0))}"
    elif avail is not None and buffers * n + (2 << 30) > avail * 1024:
        # every server's buffers at once (a pool's pages come out of MemAvailable too),
        # and 2 GiB for the clients, page tables and the page cache
        why = (f"{n} servers with {buffers >> 20} MiB of buffers each do not fit in "
               f"{avail >> 10} MiB of available memory")
    if why is None:
        return want, ("the variants are per-server settings" if o.design == "auto"
                      else "asked for"), phases
    if o.design != "auto":
        raise InputError(f"--design {o.design}: {why}; use --design restart")
    return "restart", why, []


def explained(said: str, phases: list[str], variants) -> str:
    """Why a run has its design: what chose it (choose_design) and, where THP variants take
    turns as phases, what that means; with no phases left (a budget or a server that cannot
    run them), what chose it alone."""
    if not any(map(host_wide, phases)):
        return said
    servers = [v for v in variants if not host_wide(v)]
    return (f"{said}; {', '.join(p for p in phases if host_wide(p))} change host-wide THP "
            "knobs, so they are phases: the THP setting changes from epoch to epoch while "
            f"{', '.join(servers)} run side by side in each")
