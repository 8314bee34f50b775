"""Boot-time knobs in the plan: each pool and THP knob now, at the next boot (boot.py reads
who sets what at boot, and in which order) and as planned; the findings when the next boot
would undo the plan or break what runs now."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .boot_persist import after_apply, persistence
from ..kit.findings import CORE
from ..facts.host import HostFacts
from ..facts.sysctls import PLANNED
from ..facts.thp_knobs import SIZES
from ..kit.knob_id import THP_FILES, KnobId
from ..kit.sizing import counted, fmt_page

if TYPE_CHECKING:
    from ..api.model import Report

def plan_knobs(r: Report) -> dict[KnobId, str]:
    """The value the plan wants for each boot-time knob, as apply persists it. Pools planned
    per NUMA node are left out (they persist per node)."""
    out: dict[KnobId, str] = {KnobId.pool(pp.size_kb): str(pp.target_pages) for pp in r.pools
                              if not pp.per_node}
    thp = {c.id: c.recommended for c in r.changes if c.kind == "thp" and c.id}
    p = r.profile
    for knob in THP_FILES:
        want = p.thp_wants(knob)
        value = thp.get(KnobId.thp(knob)) or getattr(r.host.thp, knob).value
        if want != "keep" and value:
            out[KnobId.thp(knob)] = str(value)
    # per-size knobs (hugepages-<kB>/enabled...): the ones the plan changes (thp_policy.py),
    # and the ones it changed before that something else would set otherwise at boot
    sizes = {k: v for k, v in thp.items() if k.per_size}
    b = r.host.boot
    for kb, d in r.host.thp.mthp.items() if b is not None else ():
        for f, v in d.items():
            s = b.at_boot(KnobId.thp(f, kb))  # a setter, not the kernel's default
            if v is not None and s is not None and s.stage >= 0 and s.value != v:
                sizes.setdefault(KnobId.thp(f, kb), v)
    out.update({k: str(v) for k, v in sizes.items()})
    # the declared settings the plan manages (facts/sysctls.py), changed now or not
    out.update({KnobId.sysctl(n): str(v) for n, v in r.sysctls.items()})
    return out


def knob_now(host: HostFacts, k: KnobId) -> str | None:
    """A boot-time knob's value now (a pool: its persistent pages, without surplus)."""
    if k.is_sysctl:
        v = host.sysctls.get(k.file)
        return None if v is None else str(v)
    if k.is_pool:
        pool = next((p for p in host.pools if p.size_kb == k.page_kb), None)
        return None if pool is None or pool.persistent_pages is None else \
            str(pool.persistent_pages)
    if k.per_size:
        return host.thp.mthp.get(k.page_kb, {}).get(k.file)
    return getattr(host.thp, k.file).value


def findings(r: Report) -> None:
    """The next boot against now and the plan (boot.py reads who sets what at boot)."""
    b, host = r.host.boot, r.host
    if b is None:
        return
    r.changes = [dataclasses.replace(c, at_boot=_at_boot(b, c.id)) if c.id
                 else c for c in r.changes]
    plan = plan_knobs(r)
    per = persistence(b, plan, host.default_hugepage_kb)
    after = after_apply(b, per)
    blocked = {k: (s, why) for k, s, why in per.blocked}
    changed = {c.id for c in r.changes if c.id}
    for knob, value in plan.items():
        s = after.at_boot(knob)
        kept = knob.is_sysctl and knob not in changed  # a sysctl as it is now
        if kept and (was := b.at_boot(knob)) is not None and was.value != value:
            # right now, persisted nowhere (or by a rival that wins): the next boot differs
            r.findings.append(CORE["boot.differs"](
                "A value set by hand now is not what boot sets. " + (
                    "apply persists it." if s is not None and s.value == value else
                    f"{s.source if s else 'Nothing'} sets it at boot after hpadvise's "
                    "drop-in: remove that setting, or make it the value now."),
                f"now {value}; at next boot {was.value} from {was.source}",
                title=f"{knob_name(knob)} is {value} now and {was.value} after a reboot"))
            continue
        if s is not None and s.value == value:
            continue
        # a per-size THP knob only thp_anon= / thp_shmem= sets, which apply does not write
        # (each size it left out would start at never) and no unit of apply's sets after
        cmdline = knob.per_size and s is not None and s.stage == 0 and not (
            knob in per.sysctl or knob in per.tuned or knob in per.other)
        if s is None or s.stage < 0 or cmdline:
            # THP without systemd, GRUB or TuneD to persist it: the kernel's default, or the
            # command line, gives the next boot its value
            known = s is not None
            r.findings.append(CORE["boot.not_persisted"](
                (f"Only {SIZES[knob.file].cmdline}= on the kernel command line sets it at boot; "
                 "apply does not write that parameter (every size it leaves out would start at "
                 "never) and cannot set it later either (no systemd unit, no TuneD)" if cmdline
                 else "Nothing here sets it at boot and apply cannot either (no systemd unit, "
                 + ("no TuneD; apply puts no per-size THP parameter on the kernel command line"
                    if knob.per_size else "no GRUB kernel parameter, no TuneD") + ")")
                + ": the kernel starts with "
                + (f"{s.value} ({s.source})" if known else "its built-in default, which is "
                   "unknown here (no kernel config readable)") + ". Add it to a boot script "
                "such as /etc/rc.local (apply prints the line).",
                f"{knob.key}: planned {value}; {b.sysctl_engine}, kernel command line from "
                f"{b.cmdline_source}", title=f"{knob_name(knob)} = {value} would not survive "
                "a reboot" if known else f"{knob_name(knob)} = {value}: unknown after a reboot",
                severity="warn" if known else "info"))
            continue
        what, why = blocked.get(knob, (s, "it applies after hpadvise's setting"))
        r.findings.append(CORE["boot.overridden"](
            f"{what.source} sets {knob_name(knob)} = {what.value} at boot and {why}: the next "
            f"boot undoes the plan ({value}). Remove that setting, or make it {value}; apply "
            "refuses to persist what it cannot make stick.",
            f"at next boot: {s.value} from {s.source}; plan: {value}",
            title=f"The next boot would set {knob_name(knob)} to {s.value}, not the planned "
                  f"{value}"))
        r.blocked.append(f"{what.source} overrides {knob_name(knob)} at boot; remove it first")
    for pool in host.pools:  # as things stand: can the instances on huge pages start again?
        knob = KnobId.pool(pool.size_kb)
        s = b.at_boot(knob)
        at_boot = int(s.value) if s is not None and s.value.isdigit() else 0
        users = [i for i in r.instances if i.running and i.backing == "hugetlb" and i.demand
                 and (i.backing_page_kb or i.demand.page_kb) == pool.size_kb]
        need = sum(i.demand.held_pages or i.demand.pages.get(pool.size_kb, 0) for i in users)
        now = knob_now(host, knob)
        if users and at_boot < need:
            r.findings.append(CORE["boot.instance_breaks"](
                "After a reboot the pool is smaller than what the instances running on it hold "
                "now: a server that falls back runs on 4 KiB pages, one that insists (huge_pages "
                "= on, -XX:+UseLargePages with a hard failure) does not start. `hpadvise apply` "
                "persists the pool.", f"{knob.key}: now {now}, at next boot {at_boot} "
                f"({s.source if s else 'nothing sets it'}); held by "
                f"{', '.join(i.id for i in users)}: {need}",
                title=f"After a reboot the {knob_name(knob)} would be {at_boot} pages; "
                      f"{counted(len(users), 'instance')} need{'s' if len(users) == 1 else ''} {need}"))
        elif now is not None and str(at_boot) != now and knob not in plan:
            r.findings.append(CORE["boot.differs"](
                "A value set by hand now is not what boot sets.", f"now {now}; at next boot "
                f"{at_boot} from {s.source if s else 'nothing (the kernel starts with none)'}",
                title=f"{knob_name(knob)} is {now} now and {at_boot} after a reboot"))
    for knob in [KnobId.thp(f) for f in THP_FILES] + [  # and the declared sysctls
            KnobId.sysctl(d.name) for d in PLANNED]:
        s, now = b.at_boot(knob), knob_now(host, knob)
        if s is not None and now is not None and s.value != now and knob not in plan:
            r.findings.append(CORE["boot.differs"](
                "A value set by hand now is not what boot sets.", f"now {now}; at next boot "
                f"{s.value} from {s.source}", title=f"{knob_name(knob)} is {now} now and "
                f"{s.value} after a reboot"))


def _at_boot(b, knob: KnobId) -> str | None:
    """The value the next boot sets for a knob as things stand (a pool nothing sets: 0)."""
    s = b.at_boot(knob)
    return s.value if s else ("0" if knob.is_pool else None)


def view(r: Report) -> list[dict]:
    """Each boot-time knob three ways: now, at the next boot (and what sets it), the plan."""
    b = r.host.boot
    if b is None:
        return []
    plan = plan_knobs(r)
    knobs = [KnobId.pool(p.size_kb) for p in r.host.pools] + \
        [KnobId.thp(f) for f in THP_FILES]
    # per-size THP knobs and declared sysctls, where the plan sets them
    knobs += [k for k in plan if k.per_size or k.is_sysctl]
    out = []
    for knob in knobs:
        s = b.at_boot(knob)
        at = _at_boot(b, knob)
        src = s.source if s else ("nothing sets it" if knob.is_pool else
                                  "the kernel's built-in default (unknown here)")
        out.append({"knob": knob.key, "name": knob_name(knob), "now": knob_now(r.host, knob),
                    "at_boot": at, "source": src, "plan": plan.get(knob)})
    return out


def knob_name(k: KnobId) -> str:
    if k.is_sysctl:
        return str(k.file)
    return f"{fmt_page(k.page_kb)} pool" if k.is_pool else f"THP {k.thp_path}"
