"""The apply journal: write-ahead records of every change, a lock, and rollback.

Each apply is one JSON-lines file `<id>.jsonl` (mode 0600) in the journal directory (mode
0700; default /var/lib/hpadvise/journal, or $HPADVISE_JOURNAL_DIR). Before a change is made
its intent is appended and fsynced with the old value; after it is made a "done" record
follows. A process killed anywhere therefore leaves enough to restore the old state: rollback
restores every intent, done or not, in reverse order (restoring an unchanged knob is a no-op).

Whole files kept for an exact restore (an option file can hold a `[client] password`) are not
written into the records: they go to `<id>.sealed/` (0700, files 0600) before the record that
points at them ({"sealed": NAME}), so the journal itself never holds a secret.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..changes.actions import Action
from ..api.engines import action_from_spec as from_spec
from ..kit.errors import InputError
from ..kit.faults import after_step, kill_later, kill_at  # noqa: F401 (apply's kill_later)
from ..kit.files import fsync_dir
from ..kit.lock import Lock  # noqa: F401 (the journal's lock, jr.Lock to its users)
from ..changes.node_pools import restore_order

DEFAULT_DIR = "/var/lib/hpadvise/journal"


def journal_dir(override: str | None = None) -> str:
    return override or os.environ.get("HPADVISE_JOURNAL_DIR") or DEFAULT_DIR


def open_dir(directory: str) -> str:
    """Create the journal directory (0700) or fail with one clear line."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
    except OSError as exc:
        raise InputError(f"journal directory {directory} is not usable: {exc.strerror}; "
                         "set --journal-dir or HPADVISE_JOURNAL_DIR") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"journal directory {directory} is not writable; set --journal-dir "
                         "or HPADVISE_JOURNAL_DIR")
    return directory


def readable_dir(directory: str) -> None:
    """For commands that only read the journal: one clear line when it cannot be read."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise InputError(f"journal directory {directory} is not a directory; give the "
                         "directory the applies were recorded in (--journal-dir)")
    if os.path.isdir(directory) and not os.access(directory, os.R_OK | os.X_OK):
        raise InputError(f"cannot read the journal in {directory}: permission denied (applies "
                         "are recorded by root; run this with sudo)")


@dataclass
class Entry:
    n: int
    spec: dict
    old: Any
    new: Any
    done: bool = False
    actual: Any = None
    sealed: bool = False
    restarting: bool = False  # a rollback began to restart its instance (Journal.restarting)


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Journal:
    path: str
    header: dict
    entries: list[Entry] = field(default_factory=list)
    status: str = "running"  # running | ok | shortfall | failed | killed?
    rolled_back: float | None = None
    # The line where the journal ends in a torn record (the file was cut, or the writer died
    # mid-line): what followed it is lost, so rollback cannot vouch for having undone it all.
    torn: int | None = None

    @property
    def id(self) -> str:
        return self.header["id"]

    # ---- writing
    @classmethod
    def create(cls, directory: str, header: dict) -> Journal:
        jid = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        path = os.path.join(directory, f"{jid}.jsonl")
        j = cls(path, {"type": "apply", "id": jid, "time": time.time(), **header})
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        j._append(j.header)
        return j

    def _append(self, record: dict) -> None:
        line = json.dumps(record, default=str) + "\n"
        with open(self.path, "a+b") as f:
            if f.tell() and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                line = "\n" + line  # a torn last line stays apart from the next record
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())

    @property
    def sealed_dir(self) -> str:
        return self.path[:-len(".jsonl")] + ".sealed"

    def _seal(self, e: Entry, what: str, value: Any) -> Any:
        """Keep `value` in a private side file and return the pointer the record holds."""
        if not e.sealed:
            return value
        d = self.sealed_dir
        os.makedirs(d, mode=0o700, exist_ok=True)
        name = f"{e.n}-{what}.json"
        _write_private(os.path.join(d, name), json.dumps(value).encode())
        fsync_dir(d)
        return {"sealed": name}

    def _unseal(self, value: Any) -> Any:
        if not (isinstance(value, dict) and list(value) == ["sealed"]):
            return value
        p = os.path.join(self.sealed_dir, os.path.basename(value["sealed"]))
        try:
            with open(p) as f:
                return json.load(f)
        except (OSError, ValueError) as exc:
            raise InputError(f"journal {self.path}: its sealed copy {p} is unreadable "
                             f"({exc}); nothing was changed") from None

    def intent(self, action: Action, old: Any, new: Any) -> Entry:
        e = Entry(len(self.entries) + 1, action.spec(), old, new, sealed=action.sealed)
        self._append({"type": "intent", "n": e.n, "action": e.spec,
                      "old": self._seal(e, "old", old), "new": self._seal(e, "new", new)})
        self.entries.append(e)
        return e

    def done(self, e: Entry, actual: Any) -> None:
        e.done, e.actual = True, actual
        self._append({"type": "done", "n": e.n, "actual": self._seal(e, "actual", actual)})
        after_step(e.n)

    def finish(self, status: str, message: str = "") -> None:
        self.status = status
        self._append({"type": "end", "status": status, "message": message})

    def restarting(self, e: Entry) -> None:
        """A rollback begins to restart e's instance. Killed in it, it may leave the server
        down: the next rollback then starts it even though it is stopped (_stays_stopped)."""
        e.restarting = True
        self._append({"type": "restarting", "n": e.n})

    def mark_rolled_back(self, errors: list[str]) -> None:
        self.rolled_back = time.time()
        self._append({"type": "rolledback", "time": self.rolled_back, "errors": errors})

    # ---- reading
    @classmethod
    def load(cls, path: str) -> Journal:
        j: Journal | None = None
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise InputError(f"cannot read journal {path}: {exc.strerror}") from None
        by_n: dict[int, Entry] = {}
        for lineno, line in enumerate(lines, 1):
            try:
                rec = json.loads(line)
                t = rec["type"]
                if t == "apply":
                    j = cls(path, rec)
                elif j is None:
                    raise ValueError("no header")
                elif t == "intent":
                    e = Entry(rec["n"], rec["action"], j._unseal(rec["old"]),
                              j._unseal(rec["new"]))
                    by_n[e.n] = e
                    j.entries.append(e)
                elif t == "done":
                    by_n[rec["n"]].done = True
                    by_n[rec["n"]].actual = j._unseal(rec.get("actual"))
                elif t == "end":
                    j.status = rec["status"]
                elif t == "rolledback":
                    j.rolled_back = rec["time"]
                elif t == "restarting" and rec["n"] in by_n:
                    by_n[rec["n"]].restarting = True
            except (ValueError, KeyError, TypeError) as exc:
                if j is not None and all(not ln.strip() or _whole(ln)
                                         for ln in lines[lineno:]):
                    j.torn = lineno  # cut here: what follows are records appended since
                    continue
                raise InputError(f"journal {path} is corrupt at line {lineno} ({exc}); "
                                 "nothing was changed — inspect or move the file aside") from None
        if j is None:
            raise InputError(f"journal {path} is empty or corrupt; nothing was changed")
        if j.status == "running":
            j.status = "interrupted"
        return j


def _whole(line: str) -> bool:
    """A record appended after a torn line (a rollback's): parseable, and not a change."""
    try:
        return json.loads(line).get("type") in ("rolledback", "restarting")
    except (ValueError, AttributeError):
        return False


def list_journals(directory: str) -> list[Journal]:
    if not os.path.isdir(directory):
        return []
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".jsonl"):
            out.append(Journal.load(os.path.join(directory, name)))
    return out


def remembered(directory: str) -> list[dict]:
    """The engine action specs of every apply not rolled back: what discovery must find
    again even when it is stopped. Nothing where the journal cannot be read (not root)."""
    try:
        journals = list_journals(directory) if os.access(directory, os.R_OK | os.X_OK) else []
    except InputError:  # a damaged journal: rollback and history say so; check goes on
        return []
    return [e.spec for j in journals if j.rolled_back is None for e in j.entries
            if "engine" in e.spec]


def find(directory: str, jid: str | None) -> Journal:
    journals = list_journals(directory)
    if jid:
        for j in journals:
            if j.id == jid:
                return j
        raise InputError(f"no apply with id {jid!r} in {directory}; `hpadvise history` lists them")
    pending = [j for j in journals if j.rolled_back is None]
    if not pending:
        raise InputError(f"nothing to roll back: no apply in {directory} that is not rolled back")
    return pending[-1]


# A restart's outcome in the journal when it failed and apply put the instance's settings back
# and started it again on them: nothing of that instance is left for rollback to restart.
PUT_BACK = "failed; runs again on its previous settings"


def checked(j: Journal) -> list[tuple[Entry, Action]]:
    """Every recorded change rebuilt, and its old value checked, before anything is restored:
    a journal naming an action this version does not know, or an old value its action cannot
    take (an edited or damaged file), is refused whole in one line and nothing changes."""
    out = []
    for e in j.entries:
        try:
            action = from_spec(e.spec)
        except InputError as exc:
            raise InputError(f"journal {j.path}, change {e.n}: {exc}; nothing was restored") from None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise InputError(f"journal {j.path}, change {e.n}: its action record is damaged "
                             f"({type(exc).__name__}); nothing was restored: inspect or move "
                             "the file aside") from None
        why = None if action.restart else action.invalid(e.old)
        if why:
            raise InputError(f"journal {j.path}, change {e.n} ({action.label}): the recorded "
                             f"old value {why}; nothing was restored: inspect or move the file "
                             "aside")
        out.append((e, action))
    return out


def plan_rollback(j: Journal) -> list[str]:
    """What rollback would do now, in its order, changing nothing: each knob whose value
    differs from the recorded old one, then the restarts (every restart apply began: one it
    was killed in may have happened; none of a server that is stopped: _stays_stopped)."""
    out, restarts = [], []
    for e, action in reversed(checked(j)):
        if action.restart:
            if e.actual != PUT_BACK:
                restarts.append(action.stopped() if _stays_stopped(e, action) else
                                action.describe(e.new, e.old)
                                + ("" if e.done else " (apply was stopped during it)"))
            continue
        try:
            current = action.get()
        except Exception as exc:
            out.append(f"cannot read {action.label}: {exc}")
            continue
        if current != e.old:
            out.append(action.describe(current, e.old) if action.kind != "file"
                       else f"{action.label}: put back as it was")
    return out + restarts[::-1]


def rollback(j: Journal, say: Callable[[str], None] = lambda s: None, restarts: bool = True
             ) -> tuple[list[str], list[str]]:
    """Restore every recorded change in reverse order, restart last (every restart apply
    began of a server that runs; none with restarts=False), then read every restored knob
    back. Returns (what reads back as restored, errors: each difference one line)."""
    changes = checked(j)
    restored: list[tuple[Entry, Action, str]] = []
    errors: list[str] = []
    ordered, first = restore_order([(e, a) for e, a in reversed(changes) if not a.restart])
    # node_pools.py: every node of a size back to 0 in one write; each node's entry is then
    # reported and read back after the restarts as if it had been written itself
    was = {id(a): a.get() for _, a in ordered for p in first if _same_pool(a, p)}
    for pool in first:
        try:
            say(f"{pool.label} ...")
            pool.set(0)
        except Exception as exc:
            errors.append(f"{pool.label}: {exc}")
    for e, action in ordered:
        try:
            current = was[id(action)] if id(action) in was else action.get()
            if current != e.old:
                say(f"{action.label} ...")
                if id(action) not in was or action.get() != e.old:
                    action.restore(e.old)
                restored.append((e, action, action.describe(current, e.old)
                                 if action.kind != "file" else f"{action.label}: restored"))
        except Exception as exc:  # keep going: restore as much as possible
            errors.append(f"{action.label}: {exc}")
        kill_at("HPADVISE_TEST_KILL_ROLLBACK_AFTER", e.n)
    done, restarted = [], []
    for e, action in changes:  # apply's order: a cluster manager's replicas first
        if not action.restart or not restarts or e.actual == PUT_BACK:
            continue
        try:
            if _stays_stopped(e, action):
                restarted.append(action.stopped())
                continue
            j.restarting(e)
            say(f"{action.label} ...")
            kill_later("HPADVISE_TEST_KILL_IN_RESTART")
            action.restore(e.old)
            why = action.restored(e.old)
            if why:
                errors.append(f"{action.label}: {why}")
            else:
                restarted.append(action.describe(e.new, e.old))
        except Exception as exc:
            errors.append(f"{action.label}: {exc}")
    # Read back after the restarts (pages held are freed), each target against its oldest
    # recorded value only: two settings in one file both restore the whole file, the later
    # change first, so the file ends as the earlier change found it.
    last = {action.target(): n for n, (e, action, _) in enumerate(restored)}
    for n, (e, action, text) in enumerate(restored):
        if last[action.target()] != n:
            done.append(text)
            continue
        try:
            why = action.restored(e.old)
        except Exception as exc:
            why = f"cannot read it back: {exc}"
        if why:
            errors.append(f"{action.label}: restored, but {why}")
        else:
            done.append(text)
    return done + restarted, errors


def _stays_stopped(e: Entry, action: Action) -> bool:
    """A server that is not running when rollback comes is not started: its restored settings
    take effect at its next start. Unless apply, or an earlier rollback, was killed while
    restarting it (the entry not done, or `restarting`): that restart may have left it down."""
    return e.done and not e.restarting and action.running() is False


def _same_pool(a: Action, pool: Action) -> bool:
    """`a` is one node's pool of the size `pool` (the global one) covers."""
    return getattr(a, "kind", "") == "pool" and getattr(a, "node", None) is not None \
        and a.size_kb == pool.size_kb and a.root == pool.root
