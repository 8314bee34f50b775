"""Actions on files: a whole file restored byte for byte, a symbolic link, a directory apply
creates, and `FileSetting`, the base of every server setting kept in a file. Writes go through
files.py (regular files only, atomically)."""

from __future__ import annotations

import base64
import difflib
import os
import shlex
from typing import Any, ClassVar

from .action_base import Action, ActionError, PathAction, missing_dirs
from ..kit.files import UnsafePath, target, write_atomic
from ..kit.secrets import redact_text


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

    def real_path(self) -> str:
        """The regular file to read and write (a link a package made is followed); a
        device, FIFO, directory or dangling link is refused (files.target). A path that does
        not exist yet is itself (its directory may come with an earlier step)."""
        if not os.path.lexists(self.path):
            return self.path
        try:
            return target(self.path, "file", follow=True)
        except UnsafePath as exc:
            raise ActionError(str(exc)) from None

    def get(self) -> str | None:
        path = self.real_path()
        try:
            with open(path, "rb") as f:
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
                os.unlink(self.real_path())
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise ActionError(f"cannot remove {self.path}: {exc.strerror}") from None
            return
        data = base64.b64decode(value)
        path = self.real_path()  # its directory exists: a Directory step made it if need be
        try:
            mode = self.mode
            uid, gid = self.uid, self.gid
            if os.path.exists(path):  # keep the file's own mode and owner
                st = os.stat(path)
                mode, uid, gid = st.st_mode & 0o7777, st.st_uid, st.st_gid
            write_atomic(path, data, mode, uid, gid)
        except OSError as exc:
            raise ActionError(f"cannot write {self.path}: {exc.strerror}") from None

    def undo_shell(self, old: str | None) -> list[str]:
        """Its old bytes back, unless they hold a secret a script must not repeat."""
        text = self.decode(old)
        if text is not None and redact_text(text) != text:
            msg = f"hpadvise: {self.path} holds a secret: put it back by hand"
            return [f"echo {shlex.quote(msg)} >&2"]
        return self.shell(old)

    def directories(self) -> list[str]:
        return missing_dirs(self.path)

    def target(self) -> str:
        return f"file:{self.path}"

    def show(self, value: Any) -> str:
        return "absent" if value is None else f"{len(base64.b64decode(value))} bytes"

    def invalid(self, value: Any) -> str | None:
        if value is None:
            return None
        try:
            base64.b64decode(value, validate=True)
        except (TypeError, ValueError):
            return "is not a file's content"
        return None

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
                os.symlink(value, self.path)  # its directory: a Directory step before
        except OSError as exc:
            raise ActionError(f"cannot link {self.path}: {exc.strerror}") from None

    def directories(self) -> list[str]:
        return missing_dirs(self.path)

    def invalid(self, value: Any) -> str | None:
        return None if value is None or isinstance(value, str) else "is not a link target"

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

    def directories(self) -> list[str]:
        return self.file().directories()

    def target(self) -> str:
        return f"file:{self.file().path}"

    def show(self, value: Any) -> str:
        """The setting's value only: the file around it may hold a password."""
        v = value.get("value") if isinstance(value, dict) else None
        return repr(v) if v is not None else "(not set)"

    def invalid(self, value: Any) -> str | None:
        if not isinstance(value, dict) or "file" not in value:
            return "is not a recorded file"
        return self.file().invalid(value["file"])

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

    def undo_shell(self, old: Any) -> list[str]:
        """The file's old bytes back (restore), unless they hold a secret a script must not
        repeat: then the line says to restore it by hand."""
        f = self.file()
        text = File.decode((old or {}).get("file"))
        if text is not None and redact_text(text) != text:
            msg = f"hpadvise: {f.path} holds a secret: put {self.label} back by hand"
            return [f"echo {shlex.quote(msg)} >&2"]
        return f.shell((old or {}).get("file"))

    def describe(self, old, new) -> str:
        if not old:
            return f"{self.label}: restored"
        return f"{self.label}: {old.get('value') or '(not set)'} -> " \
               f"{new.get('value') or '(not set)'} ({self.how}; needs a restart)"


class Directory(PathAction):
    """A directory apply creates for a file it writes (a drop-in directory, a unit's wants
    directory): absent (None) before, "present" after. Restore removes it again when it is
    empty; a file someone else put there since keeps it, and rollback says so. One inside a
    server's own root keeps that root and its path there (`root`, `inside`), and is reached
    through whichever process holds the root when it is restored."""
    kind = "directory"

    def __init__(self, path: str, root: dict | None = None, inside: str | None = None):
        super().__init__(path)
        self.root, self.inside = root, inside

    def spec(self) -> dict:
        return {**super().spec(), **({"root": self.root, "inside": self.inside}
                                     if self.root else {})}

    def root_spec(self) -> dict | None:
        return self.root

    def here(self) -> str:
        """The directory as the host reaches it now."""
        if not self.root or not self.inside:
            return self.path
        from ..facts.roots import reach
        try:
            return reach(self.root, self.inside)
        except OSError as exc:  # roots.RootGone: nothing holds the root any more
            raise ActionError(f"{self.inside} in the root {self.root.get('host_path') or ''}: "
                              f"{exc.strerror or exc}") from None

    def get(self) -> str | None:
        path = self.here()
        if os.path.isdir(path) and not os.path.islink(path):
            return "present"
        if os.path.lexists(path):
            raise ActionError(f"{path} exists and is not a directory; move it aside")
        return None

    def set(self, value: str | None) -> None:
        path = self.here()
        try:
            if value == "present":
                os.mkdir(path, 0o755)
            elif os.path.isdir(path):
                os.rmdir(path)
        except FileExistsError:
            pass
        except OSError as exc:
            if value is None and os.path.isdir(path) and os.listdir(path):
                raise ActionError(f"directory {path} is kept: it holds files hpadvise did "
                                  f"not write ({', '.join(sorted(os.listdir(path))[:3])})"
                                  ) from None
            raise ActionError(f"directory {path}: {exc.strerror}") from None

    def invalid(self, value: Any) -> str | None:
        return None if value in (None, "present") else "is neither absent nor present"

    def describe(self, old, new) -> str:
        return f"create directory {self.path}" if new else f"remove directory {self.path}"

    def shell(self, new: str | None) -> list[str]:
        path = shlex.quote(self.path)
        return [f"mkdir {path}"] if new else [f"rmdir {path}"]
