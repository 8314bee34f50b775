"""A change stacked on an active journal entry of the same setting is refused, with the
command that ends the entry.

capture and validate put back everything they change before they end: a journal of theirs
that is not rolled back was left by one that was killed, and the values it changed are its,
not the host's or the server's own. A second change of such a setting would journal the
killed one's value as the original, and its own rollback would "restore" that: a capture
killed with log_statement = all, captured again, left log_statement = all on. So capture,
apply and validate ask here first, before they change anything, and are refused while one
of their settings is held by such a journal.

Applies are meant to stay: a second apply over an active one (another engine planned into
the same pool) journals the first one's value as its own original, and rollback, newest
first, undoes them in turn. What would break that is rolling back the older one first (it
would put back a value the newer one changed since): `older_than_holders` refuses it.
"""

from __future__ import annotations

import os

from ..kit.errors import InputError


def key(action) -> tuple:
    """What one setting is on the host: its kind, what it changes (a file, a knob) and, for
    several settings in one file, its name."""
    return (action.kind, action.target(), getattr(action, "name", None))


# The commands that put back what they change before they end: an active journal of one of
# them was left by a kill.
ENDS_ITSELF = ("capture", "validate", "probe")


def command_of(j) -> str:
    return str(j.header.get("command") or "apply")


def keys_of(j) -> set[tuple]:
    """The settings a journal changed; restarts and reloads, which change no setting, left
    out, and so is an action this version does not know (rollback says so)."""
    from ..api.engines import action_from_spec
    out = set()
    for e in j.entries:
        try:
            a = action_from_spec(e.spec)
        except Exception:
            continue
        if not a.restart:
            out.add(key(a))
    return out


def active(directory: str) -> list[tuple[str, str, tuple]]:
    """(journal ID, its command, setting key) of every change in a journal not rolled back.
    Nothing where the journal cannot be read (not root: the command that journals says so
    itself)."""
    from .journal import list_journals
    if not os.access(directory, os.R_OK | os.X_OK):
        return []
    return [(j.id, command_of(j), k)  # a damaged journal is refused there, in one line
            for j in list_journals(directory) if j.rolled_back is None for k in keys_of(j)]


def refuse_stacked(directory: str, actions: list, command: str) -> None:
    """One line of bad input (exit 2) where one of `actions` changes a setting that a killed
    capture or validate changed and did not put back: `hpadvise rollback ID` ends that one."""
    held = {k: (jid, cmd) for jid, cmd, k in active(directory) if cmd in ENDS_ITSELF}
    for a in actions:
        if key(a) in held:
            jid, cmd = held[key(a)]
            raise InputError(
                f"{command}: {a.label} was changed by {cmd} {jid}, which has not put it back "
                f"(still running, or killed before it could): the value now is its, not the "
                f"original; `hpadvise rollback {jid}` ends it, then run {command} again")


def older_than_holders(directory: str, j) -> None:
    """One line of bad input where a journal newer than `j`, not rolled back, changed one of
    j's settings again: rolling j back first would put back a value that one changed since,
    and its own rollback would then restore j's. The newer ones go first."""
    from .journal import list_journals
    mine = keys_of(j)
    newer = [o for o in list_journals(directory) if o.rolled_back is None and o.id != j.id
             and o.header.get("time", 0) >= j.header.get("time", 0) and keys_of(o) & mine]
    if newer:
        ids = " then ".join(f"`hpadvise rollback {o.id}`" for o in reversed(newer))
        raise InputError(f"{command_of(j)} {j.id} changed settings that {command_of(newer[-1])} "
                         f"{newer[-1].id}, newer and not rolled back, changed again: roll back "
                         f"the newer first ({ids}), then {j.id}")
