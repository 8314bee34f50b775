"""The declared kernel settings in the plan (facts/sysctls.py): each one's rule, given the
setting now, the profile's value and what the planned instances need, decides the value the
plan wants (`Report.sysctls`, which apply persists); one that differs from now is a "sysctl"
Change, with its declared finding, as is a case no value suits."""

from __future__ import annotations

from ..api.model import Change, Report
from ..facts.sysctls import PLANNED, Case, ShmUser
from ..kit.knob_id import KnobId
from ..nextboot.boot_persist import own


def plan(r: Report) -> None:
    users = tuple(ShmUser(i.id, i.shm_cred) for i in r.instances
                  if i.running and i.shm_sysv and i.shm_cred is not None)
    b = r.host.boot
    for s in PLANNED:
        now = r.host.sysctls.get(s.name)
        at = b.at_boot(KnobId.sysctl(s.name)) if b else None
        want = s.rule(Case(now, r.profile.wants(s.name), r.host.numa_nodes, users,
                           at is not None and own(at)))
        if want is None:
            continue
        if want.value is not None:
            r.sysctls[s.name] = want.value
            if want.value == now:
                continue
            r.changes.append(Change("sysctl", s.name, now, want.value, want.why, knob=s.name,
                                    id=KnobId.sysctl(s.name)))
        r.findings.append(s.code(
            want.why, want.evidence, severity=want.severity,
            title=want.title or f"{s.name} is {now}; the plan sets {want.value}"))
