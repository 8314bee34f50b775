"""validate's vocabulary: the variants a run can compare, how they are labelled and paired,
and the order servers start in side by side.

What each variant changes (and nothing else):
  current        nothing: the host and server as they are
  recommended    the plan, as `apply` would make it (runtime and the server's settings)
  thp-always     THP `enabled` = always: private anonymous memory (defrag as the host has it)
  thp-never      THP `enabled` = never
  thp-shmem      THP `shmem_enabled` = always: shared memory, PostgreSQL's buffers among it
  hugepages-off  the server's own huge page setting off
  hugepages-1g   the server on 1 GiB static pages (an engine that can choose its page size)
A variant named twice runs twice, as "name" and "name#2" (labels_for): an A/A run, whose
effect measures the noise of the host and the design, since nothing differs.
THP `enabled` does not reach shared memory, `shmem_enabled` does (transhuge.rst): the split is
what a DBA means by "THP on" versus the shared-memory THP that helps PostgreSQL.

Side by side (the resident and simultaneous designs) the THP variants are phases: every epoch
runs the per-server variants' servers side by side under one THP setting, the settings taking
turns from epoch to epoch (phase_at). The comparisons between per-server variants (the plan's
among them) then use every epoch; a THP variant is `current`'s server in its phase, compared
cycle by cycle (one epoch of each phase, THP_UNIT) with the other phase of its pair.
"""

from __future__ import annotations

import re

from hpadvise.api.face import InputError

VARIANTS = ("current", "recommended", "thp-always", "thp-never", "thp-shmem", "hugepages-off",
            "hugepages-1g")
# Variants that are settings of the server alone (plus pool pages for it): they can run side by
# side on servers that are resident at once. THP variants change host-wide knobs.
PER_SERVER = ("current", "recommended", "hugepages-off", "hugepages-1g")
# Variants whose server takes huge pages: side by side they start first (start_order).
ON_HUGE_PAGES = ("recommended", "hugepages-1g")
# The host-wide THP switch of each THP variant: (knob under transparent_hugepage/, value).
THP_SWITCH = {"thp-always": ("enabled", "always"), "thp-never": ("enabled", "never"),
              "thp-shmem": ("shmem_enabled", "always")}
DEFAULT_VARIANTS = ("current", "recommended", "thp-never", "thp-always")
# Comparisons (A, B): the effect reported is B over A.
PAIRS = (("current", "recommended"), ("thp-never", "thp-always"), ("current", "thp-shmem"),
         ("current", "hugepages-off"), ("recommended", "hugepages-1g"))


# A side-by-side run with THP phases compares THP settings on the server of this variant: THP
# variants are defined as the host as it is with one knob changed.
THP_BASE = "current"
# The THP comparisons' paired unit: a cycle, one epoch in each phase (docs/design.md).
THP_UNIT = "cycle"


# The longest budget validate takes: a week. Longer is a typo (the host's knobs stay switched
# for as long as it runs).
MAX_DURATION_S = 7 * 24 * 3600


def parse_duration(text: str) -> int:
    mt = re.fullmatch(r"\s*(\d+)\s*(s|m|h)?\s*", text or "")
    if not mt:
        raise InputError(f"duration {text!r} is not a duration; write it like 90s, 10m or 1h")
    seconds = int(mt.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[mt.group(2)]
    if seconds < 1:
        raise InputError(f"duration {text!r} is no time at all; give at least 1s (e.g. 10m)")
    if seconds > MAX_DURATION_S:
        raise InputError(f"duration {text!r} is more than a week; give at most 168h")
    return seconds


def kind(label: str) -> str:
    """The variant a label runs: "current#2" is a second server of "current" (an A/A run)."""
    return label.split("#", 1)[0]


def labels_for(names: list[str]) -> list[str]:
    """Unique labels for the variants asked for, in order: a variant named again becomes
    "name#2", "name#3", ..., a second server of the same variant. Comparing a variant with
    itself (an A/A run) measures the host's own noise: its effect should be 0."""
    out: list[str] = []
    for v in names:
        label, k = v, 2
        while label in out:
            label, k = f"{kind(v)}#{k}", k + 1
        out.append(label)
    return out


def pairs_for(variants: list[str]) -> list[tuple[str, str]]:
    out = [p for p in PAIRS if p[0] in variants and p[1] in variants]
    # every repeat against the first server of its variant (A/A)
    out += [(next(u for u in variants if kind(u) == kind(v)), v)
            for v in variants if kind(v) != v]
    if not out and len(variants) >= 2:
        out = [(variants[0], variants[1])]
    return out


def start_order(variants: list[str], epoch: int) -> list[str]:
    """The order the servers start in at an epoch: those on huge pages first, so that a
    server on `huge_pages = try` finds no free pages of the held pools and stays on 4 KiB
    pages. Among servers alike, the order turns every n epochs (n servers), so that starting
    (and prewarming) later is not always the same variant's lot, and, with the servers
    turning every epoch (runner: assign_servers), not always the same server's either."""
    n = len(variants)
    k = (epoch // n) % n if n else 0
    turned = variants[k:] + variants[:k]
    return sorted(turned, key=lambda v: kind(v) not in ON_HUGE_PAGES)


def host_wide(v: str) -> bool:
    """A variant that changes host-wide knobs (THP), not a setting of one server."""
    return kind(v) not in PER_SERVER


def phases_for(variants: list[str]) -> list[str]:
    """The THP phases a side-by-side run needs: every THP variant asked for, and the host as
    it is (phase `current`) where a THP variant is compared with `current` itself (as
    thp-shmem is). Empty where no phases can serve: no THP variant, no comparison between
    per-server variants to run side by side, or no `current` server whose THP changes."""
    pairs = pairs_for(variants)
    servers = [v for v in variants if not host_wide(v)]
    thp = [v for v in variants if host_wide(v)]
    if not thp or THP_BASE not in servers or not any(
            not host_wide(a) and not host_wide(b) for a, b in pairs):
        return []
    base = [THP_BASE] if any(THP_BASE in p and (host_wide(p[0]) or host_wide(p[1]))
                              for p in pairs) else []
    return base + thp


def phase_at(epoch: int, phases: list[str]) -> str | None:
    """The THP phase of an epoch: cycles of one epoch per phase, the order turned by one place
    every cycle (a Latin square: over k cycles of k phases each phase holds every position
    once), so neither a phase nor the first epoch after a switch stays with one setting. For
    two phases: A B, B A, A B, ... (ABBA)."""
    if not phases:
        return None
    k = len(phases)
    cycle, pos = divmod(epoch, k)
    return phases[(pos + cycle) % k]


def client_order(variants: list[str], block: int) -> list[str]:
    """Simultaneous design: the order in which the variants' clients are started, and their
    servers re-pinned at each trade, in a block. These steps come milliseconds apart; still,
    no variant should always go first. The order turns every n blocks, one block before the
    start order turns (start_order), so that with two variants and one round an epoch each
    variant goes first in two of every four epochs: once on each server, and once after each
    way of starting (server, start order and client order are balanced against one another,
    a 2^(3-1) fractional design)."""
    n = len(variants)
    k = ((block + 1) // n) % n if n else 0
    return variants[k:] + variants[:k]


def group_of(i: int, r: int, n: int) -> int:
    """Simultaneous design: the CPU group the i-th variant side by side starts on in block r,
    of n groups; over n blocks each variant starts once on every group. With one round per
    epoch, a server starts on the same group every epoch (the variants turn among the
    servers alike); the trades within each run give every server equal time on every
    group."""
    return (i + r) % n
