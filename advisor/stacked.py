"""A change stacked on an active journal entry of the same setting is refused, with the
command that ends the entry.

A journal not rolled back (an apply, or a capture killed before it put its settings back)
holds the value each setting had before it. A second change of the same setting would
journal the first one's value as the original, and its own rollback would "restore" that:
a capture killed with log_statement = all, captured again, left log_statement = all on.
So capture (and any command that journals changes) asks here first, before it changes
anything.
"""

from __future__ import annotations

import os

from .errors import InputError


def key(action) -> tuple:
    """What one setting is on the host: its kind, what it changes (a file, a knob) and, for
    several settings in one file, its name."""
    return (action.kind, action.target(), getattr(action, "name", None))


def active(directory: str) -> list[tuple[str, str, tuple]]:
    """(journal ID, its command, setting key) of every change in a journal not rolled back;
    restarts and reloads, which change no setting, left out. Nothing where the journal
    cannot be read (not root: the command that journals says so itself)."""
    from .engines import action_from_spec
    from .journal import list_journals
    if not os.access(directory, os.R_OK | os.X_OK):
        return []
    out = []
    for j in list_journals(directory):  # a damaged journal is refused there, in one line
        if j.rolled_back is not None:
            continue
        for e in j.entries:
            try:
                a = action_from_spec(e.spec)
            except Exception:  # an action this version does not know: rollback says so
                continue
            if not a.restart:
                out.append((j.id, str(j.header.get("command") or "apply"), key(a)))
    return out


def refuse_stacked(directory: str, actions: list, command: str) -> None:
    """One line of bad input (exit 2) where one of `actions` changes a setting that a
    journal not rolled back changed: `hpadvise rollback ID` ends that one."""
    held = {k: (jid, cmd) for jid, cmd, k in active(directory)}
    for a in actions:
        if key(a) in held:
            jid, cmd = held[key(a)]
            raise InputError(
                f"{command}: {a.label} was changed by {cmd} {jid}, which is not rolled back "
                f"(killed before it put its settings back?): the value now is its, not the "
                f"server's own; `hpadvise rollback {jid}` ends it, then run {command} again")
