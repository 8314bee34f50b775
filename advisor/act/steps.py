"""What apply's plan is made of: ordered steps, each an action with the value to set, its
phase and, once run, its status; the plan around them; the result of running it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..changes.actions import Action
from ..api.model import Instance
from ..planning.plan import Report


@dataclass
class Step:
    action: Action
    new: Any
    why: str
    phase: str  # runtime | persist | engine | restart
    old: Any = None
    error: str | None = None
    unread: str | None = None  # why the old value could not be read (plans made without root)
    # planned | done | unchanged (already so when its turn came) | failed | undone (rolled
    # back after a later step failed) | not reached
    status: str = "planned"

    @property
    def needed(self) -> bool:
        return self.error is None and (self.unread is not None
                                       or not self.action.same(self.old, self.new))


@dataclass
class ApplyPlan:
    report: Report
    instances: list[Instance]
    steps: list[Step]
    notices: list[str] = field(default_factory=list)
    restart_pending: list[str] = field(default_factory=list)
    # instances that need a restart apply cannot give them (their engine has no restart for
    # them: a server in a root of its own, a manager whose API is unread): its advice says how
    restart_unaided: list[str] = field(default_factory=list)

    @property
    def changes(self) -> list[Step]:
        return [s for s in self.steps if s.needed]


@dataclass
class Result:
    journal: str | None
    done: list[str]
    problems: list[str]
    status: str  # ok | nothing | shortfall | restart-failed | failed
