"""The base of every change hpadvise makes: an Action with get / set / verify / restore and
the shell lines for the same change, and the errors it raises. actions.py holds the kernel's
knobs and the restart base, file_actions.py the files; engines import all of them from
actions.py."""

from __future__ import annotations

import os
from typing import Any, ClassVar


class ActionError(Exception):
    """A change that could not be made; the message says what and what to do."""


class NotStopped(ActionError):
    """A restart refused before anything was stopped (the server would not come back: its
    configuration has errors): the instance runs on as it was."""


class Action:
    kind: ClassVar[str] = ""
    restart: ClassVar[bool] = False  # restarts are deferred to the end of a rollback
    # Its values are whole files, which may hold secrets: the journal keeps them apart.
    sealed: ClassVar[bool] = False
    instance: str | None = None  # ID of the instance this action belongs to; None: the host

    def spec(self) -> dict:
        raise NotImplementedError

    def covers(self, other: Action) -> bool:
        """Whether this change is one of `other`'s instance's settings (what a failed restart
        of that instance puts back): by default, those of the same instance; a cluster-wide
        setting covers every member's restart."""
        return self.instance is not None and self.instance == other.instance

    def target(self) -> str:
        """What it changes on the host, to tell two actions on the same thing apart from two
        on different things (several settings in one file are one target)."""
        return self.identity()

    def identity(self) -> str:
        """What makes two actions one change, made once by apply (by default the whole spec;
        a cluster-wide setting reached through any member is one change)."""
        import json
        return json.dumps(self.spec(), sort_keys=True, default=str)

    @classmethod
    def from_spec(cls, spec: dict) -> Action:
        """The inverse of spec(): the keyword arguments of the constructor, plus "kind"."""
        return cls(**{k: v for k, v in spec.items() if k != "kind"})

    def shell(self, new: Any) -> list[str]:
        """Shell lines (run as root) that make the same change as set(new)."""
        raise NotImplementedError

    def undo_shell(self, old: Any) -> list[str]:
        """Shell lines that put the old value back (restore(old)), for `apply --print-script`
        undoing a failed script; the same as shell(old) where set takes the old value."""
        return self.shell(old)

    @property
    def label(self) -> str:
        raise NotImplementedError

    def get(self) -> Any:
        raise NotImplementedError

    def set(self, value: Any) -> None:
        raise NotImplementedError

    def verify(self, value: Any) -> tuple[bool, Any]:
        actual = self.get()
        return actual == value, actual

    def restore(self, old: Any) -> None:
        self.set(old)

    def same(self, old: Any, new: Any) -> bool:
        """True when setting `new` would change nothing (apply skips the step)."""
        return old == new

    def describe(self, old: Any, new: Any) -> str:
        return f"{self.label}: {old} -> {new}"

    def show(self, value: Any) -> str:
        """A value as a message may print it (a sealed value's file bytes never are)."""
        return repr(value)

    def invalid(self, value: Any) -> str | None:
        """Why `value` cannot be restored by this action (a journal edited or damaged), or
        None. Checked for every change before rollback restores any."""
        return None

    def restored(self, old: Any) -> str | None:
        """Read back after a restore: None when it reads `old` again, else what it reads."""
        current = self.get()
        return None if current == old else f"it reads {self.show(current)}, not " \
                                           f"{self.show(old)}"

    def directories(self) -> list[str]:
        """Directories this action writes into that do not exist yet, outermost first:
        apply creates each in a journaled step of its own (Directory) before this one, so
        that rollback removes it again."""
        return []

    def root_spec(self) -> dict | None:
        """The root its paths are in, where its server has one of its own (the journaled
        spec of roots.ProcRoot): a directory made for it is found there again by rollback,
        whatever process holds that root by then. None: the host's own."""
        return None


def missing_dirs(path: str) -> list[str]:
    """The directories above `path` that do not exist, outermost first."""
    out = []
    d = os.path.dirname(os.path.abspath(path))
    while d and d != "/" and not os.path.lexists(d):
        out.append(d)
        d = os.path.dirname(d)
    return out[::-1]


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:
        raise ActionError(f"cannot write {text.strip()!r} to {path}: {exc.strerror}") from None


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as exc:
        raise ActionError(f"cannot read {path}: {exc.strerror}") from None


class PathAction(Action):
    """An action on one path; its spec is the path."""

    def __init__(self, path: str):
        self.path = path

    def spec(self) -> dict:
        return {"kind": self.kind, "path": self.path}

    @property
    def label(self) -> str:
        return self.path
