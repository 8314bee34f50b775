"""Every tunable as an Action with get / set / verify / restore, and the shell lines that
make the same change (`apply --print-script`).

An Action is rebuilt from its `spec()` (plain JSON) by `from_spec`, which is how `rollback`
restores what an earlier process changed. Engines add their own kinds (Engine.action_kinds),
usually on the two bases here that every database needs: `FileSetting` (a server setting kept
in a file, restored byte for byte) and `Restart`. Like TuneD's plugins, a get/set pair gives
dry-run, verify and rollback for free.
"""

from __future__ import annotations

import base64
import difflib
import os
import shlex
from typing import Any, ClassVar

from .files import write_atomic
from .secrets import redact_text
from .sizing import fmt_page


class ActionError(Exception):
    """A change that could not be made; the message says what and what to do."""


class Action:
    kind: ClassVar[str] = ""
    restart: ClassVar[bool] = False  # restarts are deferred to the end of a rollback
    # Its values are whole files, which may hold secrets: the journal keeps them apart.
    sealed: ClassVar[bool] = False
    instance: str | None = None  # ID of the instance this action belongs to; None: the host

    def spec(self) -> dict:
        raise NotImplementedError

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


class SysfsChoice(PathAction):
    """A THP knob such as /sys/kernel/mm/transparent_hugepage/enabled ('always [madvise] never')."""
    kind = "sysfs_choice"

    @property
    def label(self) -> str:
        return self.path.replace("/sys/kernel/mm/", "")

    def get(self) -> str:
        text = _read(self.path)
        for w in text.split():
            if w.startswith("["):
                return w.strip("[]")
        return text.strip()

    def set(self, value: str) -> None:
        _write(self.path, value)

    def shell(self, new: str) -> list[str]:
        return [f"echo {shlex.quote(str(new))} > {self.path}"]


class Compact(PathAction):
    """Write 1 to /proc/sys/vm/compact_memory before growing a pool: it assembles the free
    contiguous blocks huge pages need (Documentation/admin-guide/sysctl/vm.rst). Not a
    setting, so there is nothing to restore."""
    kind = "compact"

    def __init__(self, path: str = "/proc/sys/vm/compact_memory"):
        super().__init__(path)

    @property
    def label(self) -> str:
        return "compact memory"

    def get(self) -> None:
        return None

    def set(self, value: Any) -> None:
        if value:
            try:
                _write(self.path, "1")
            except ActionError:
                pass  # best effort: a kernel without CONFIG_COMPACTION still allocates

    def verify(self, value: Any) -> tuple[bool, Any]:
        return True, value

    def restore(self, old: Any) -> None:
        pass

    def describe(self, old, new) -> str:
        return "compact memory before growing the pool"

    def shell(self, new: Any) -> list[str]:
        return [f"echo 1 > {self.path} || true"]


class Pool(Action):
    """nr_hugepages of one page size, globally or on one NUMA node."""
    kind = "pool"

    def __init__(self, size_kb: int, node: int | None = None, root: str = ""):
        self.size_kb, self.node, self.root = size_kb, node, root

    @property
    def path(self) -> str:
        if self.node is None:
            return f"{self.root}/sys/kernel/mm/hugepages/hugepages-{self.size_kb}kB/nr_hugepages"
        return (f"{self.root}/sys/devices/system/node/node{self.node}/hugepages/"
                f"hugepages-{self.size_kb}kB/nr_hugepages")

    def spec(self) -> dict:
        return {"kind": self.kind, "size_kb": self.size_kb, "node": self.node, "root": self.root}

    @property
    def label(self) -> str:
        return f"pool {fmt_page(self.size_kb)}" + (f" node {self.node}" if self.node is not None
                                                    else "")

    def get(self) -> int:
        """The persistent pool. sysfs nr_hugepages counts surplus pages too (mm/hugetlb.c,
        nr_hugepages_show_common shows nr_huge_pages), while a write sets the persistent count
        (max_huge_pages); pages still in use when a pool is lowered stay as surplus until
        freed. Reading nr - surplus keeps get and set symmetric, so a restore never turns
        surplus pages into a persistent pool."""
        nr = int(_read(self.path).split()[0])
        surplus = self.path.replace("/nr_hugepages", "/surplus_hugepages")
        try:
            return nr - int(_read(surplus).split()[0])
        except (ActionError, ValueError, IndexError):
            return nr

    def set(self, value: int) -> None:
        _write(self.path, str(int(value)))

    def shell(self, new: int) -> list[str]:
        """Set, then check what the kernel granted, as apply does: a short pool stops the
        script with the shortfall."""
        n = int(new)
        return [f"echo {n} > {self.path}",
                f'got=$(cat {self.path}); [ "$got" -ge {n} ] || {{ echo "hpadvise: the kernel '
                f'granted $got of {n} {fmt_page(self.size_kb)} pages; free memory or reserve '
                f'them at boot" >&2; exit 1; }}']


class Restart(Action):
    """Base of the engines' restart actions: the instance's spec is all it carries; there is no
    old value to keep, and restoring means restarting again (rollback runs restarts last).
    Restarts run lowest `order` first (a cluster manager's replicas before its leader)."""
    restart = True
    order = 0

    def __init__(self, **spec):
        self.s = spec
        self.instance = spec.get("instance")

    def spec(self) -> dict:
        return {**self.s, "kind": self.kind}

    def get(self) -> None:
        return None

    def restore(self, old=None) -> None:
        self.set(True)

    def describe(self, old, new) -> str:
        return self.label


class File(Action):
    """A whole file, written atomically (temp file in the same directory, fsync, rename).
    The old value is the file's bytes (base64) or None when it did not exist, so restore puts
    it back byte for byte or removes it."""
    kind = "file"
    sealed = True

    def __init__(self, path: str, mode: int = 0o644, uid: int | None = None,
                 gid: int | None = None):
        self.path, self.mode, self.uid, self.gid = path, mode, uid, gid

    def spec(self) -> dict:
        return {"kind": self.kind, "path": self.path, "mode": self.mode, "uid": self.uid,
                "gid": self.gid}

    @property
    def label(self) -> str:
        return self.path

    def get(self) -> str | None:
        try:
            with open(self.path, "rb") as f:
                return base64.b64encode(f.read()).decode()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ActionError(f"cannot read {self.path}: {exc.strerror}") from None

    @staticmethod
    def encode(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    @staticmethod
    def decode(value: str | None) -> str | None:
        return None if value is None else base64.b64decode(value).decode("utf-8", "replace")

    def set(self, value: str | None) -> None:
        if value is None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            return
        data = base64.b64decode(value)
        d = os.path.dirname(self.path)
        try:
            os.makedirs(d, exist_ok=True)
            mode = self.mode
            uid, gid = self.uid, self.gid
            if os.path.exists(self.path):  # keep the file's own mode and owner
                st = os.stat(self.path)
                mode, uid, gid = st.st_mode & 0o7777, st.st_uid, st.st_gid
            write_atomic(self.path, data, mode, uid, gid)
        except OSError as exc:
            raise ActionError(f"cannot write {self.path}: {exc.strerror}") from None

    def describe(self, old, new) -> str:
        a = redact_text(self.decode(old) or "").splitlines(keepends=True)
        b = redact_text(self.decode(new) or "").splitlines(keepends=True)
        diff = "".join(difflib.unified_diff(a, b, f"{self.path} (now)" if old is not None
                                            else "/dev/null", f"{self.path} (new)"))
        return diff.rstrip("\n")

    def shell(self, new: str | None) -> list[str]:
        path = shlex.quote(self.path)
        if new is None:
            return [f"rm -f {path}"]
        body = (self.decode(new) or "").rstrip("\n")
        out = [f"mkdir -p {shlex.quote(os.path.dirname(self.path))}",
               f"cat > {path} <<'HPADVISE_EOF'", body, "HPADVISE_EOF"]
        if not os.path.exists(self.path):  # a new file: mode and owner as set() gives them
            out.append(f"chmod {self.mode:o} {path}")
            if self.uid is not None:
                out.append(f"chown {self.uid}:{self.gid if self.gid is not None else ''} {path}")
        return out


class Symlink(PathAction):
    """A symbolic link (systemd's `enable`): old value is the link target or None."""
    kind = "symlink"

    def get(self) -> str | None:
        try:
            return os.readlink(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ActionError(f"cannot read link {self.path}: {exc.strerror}") from None

    def set(self, value: str | None) -> None:
        try:
            if os.path.lexists(self.path):
                os.unlink(self.path)
            if value is not None:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                os.symlink(value, self.path)
        except OSError as exc:
            raise ActionError(f"cannot link {self.path}: {exc.strerror}") from None

    def describe(self, old, new) -> str:
        return f"{self.path} -> {new}" if new else f"remove {self.path}"

    def shell(self, new: str | None) -> list[str]:
        path = shlex.quote(self.path)
        if new is None:
            return [f"rm -f {path}"]
        return [f"mkdir -p {shlex.quote(os.path.dirname(self.path))}",
                f"ln -sfn {shlex.quote(new)} {path}"]


class FileSetting(Action):
    """A server setting kept in a file (an option file, postgresql.auto.conf). Subclasses say
    where (`file`), how to read the value from the text (`read_value`) and how to write it
    (`render`). get() returns {"value": the value or None, "file": the file's bytes}; restore
    puts the bytes back exactly (or removes a file that did not exist). The change takes effect
    at the server's next start."""
    how: ClassVar[str] = ""  # how it is written, for describe()
    sealed = True

    name: str
    value: str

    def file(self) -> File:
        raise NotImplementedError

    def read_value(self, text: str) -> str | None:
        raise NotImplementedError

    def render(self, current: str | None) -> str:
        """The file's new text with the setting in it."""
        raise NotImplementedError

    @staticmethod
    def normal(value: str | None) -> str | None:
        """The form in which two values compare (an engine may ignore case)."""
        return value

    @property
    def wanted(self) -> dict:
        """The value to hand to set()."""
        return {"value": self.value}

    def get(self) -> dict:
        raw = self.file().get()
        value = self.read_value(File.decode(raw) or "") if raw is not None else None
        return {"value": value, "file": raw}

    def set(self, value: dict) -> None:
        self.file().set(File.encode(self.render(File.decode(self.file().get()))))

    def verify(self, value: dict) -> tuple[bool, dict]:
        actual = self.get()
        return self.same(actual, value), actual

    def restore(self, old: dict) -> None:
        self.file().set(old["file"])

    def same(self, old: dict, new: dict) -> bool:
        return self.normal(old["value"]) == self.normal(new["value"])

    def appendix(self) -> str | None:
        """Text that sets the value when appended to the file (where the last occurrence
        wins), for a script written by someone who cannot read the file; None: no such form."""
        return None

    def shell(self, new: dict) -> list[str]:
        f = self.file()
        why = None
        try:
            current = f.get()
            text = File.decode(current) or ""
            if redact_text(text) != text:  # never print a password the file holds
                why = f"{f.path} holds a secret, which a script must not repeat"
        except ActionError as exc:  # not readable here
            why = str(exc)
        if why is None:
            return f.shell(File.encode(self.render(text)))
        tail = self.appendix()
        if tail is None:
            raise ActionError(f"{why}, and {self.label} has no form that can be appended: "
                              "set it by hand")
        return [f"# {why}: appended, where the last occurrence wins",
                f"cat >> {shlex.quote(f.path)} <<'HPADVISE_EOF'", tail.rstrip("\n"),
                "HPADVISE_EOF"]

    def describe(self, old, new) -> str:
        if not old:
            return f"{self.label}: restored"
        return f"{self.label}: {old.get('value') or '(not set)'} -> " \
               f"{new.get('value') or '(not set)'} ({self.how}; needs a restart)"


KINDS: dict[str, type[Action]] = {c.kind: c for c in (SysfsChoice, Compact, Pool, File, Symlink)}
