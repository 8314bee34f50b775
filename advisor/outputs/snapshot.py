"""Write what a recording SysRoot read as a tree that `SysRoot(tree)` reads back the same way.

Used for offline audits (`hpadvise check --root DIR`) and to capture the unit-test fixtures
from real machines (tests/fixtures/capture.py).

A snapshot holds process command lines, option files and server logs, so it is written for
its owner only (directories 0700, files 0600) and without secrets (secrets.py): command lines
and text files have their passwords replaced; process environments are left out unless asked
for, and then have the values of secret-looking names replaced.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..kit.files import new_directory
from ..kit.secrets import redact_args, redact_environ, redact_text
from ..facts.sysroot import SysRoot

_PROC_FILE = re.compile(r"/proc/(\d+|self)/(cmdline|environ)$")
_PROC_LINK = re.compile(r"/proc/\d+/(cwd|exe)$")


def clean(path: str, data: bytes, environ: bool) -> bytes | None:
    """The bytes a snapshot may keep for `path`; None to leave the file out."""
    m = _PROC_FILE.match(path)
    text = data.decode("utf-8", "surrogateescape")
    if m and m.group(2) == "cmdline":
        args = text.split("\0")
        end = [""] if args and args[-1] == "" else []
        return "\0".join(redact_args([a for a in args if a]) + tuple(end)).encode(
            "utf-8", "surrogateescape")
    if m:  # environ
        if not environ:
            return None
        env = redact_environ(dict(e.partition("=")[::2] for e in text.split("\0") if "=" in e))
        return "".join(f"{k}={v}\0" for k, v in env.items()).encode("utf-8", "surrogateescape")
    return redact_text(text).encode("utf-8", "surrogateescape")


def _inside(out: Path, path: str) -> Path:
    """Where a read path lands in the snapshot: normalised first, so that a path with `..`
    (a configuration file named on a command line) cannot climb out of the snapshot."""
    return out / os.path.normpath("/" + path).lstrip("/")


def write_snapshot(sr: SysRoot, directory: str, environ: bool = False) -> int:
    if sr.recorded is None:
        raise ValueError("SysRoot was not recording")
    out = Path(new_directory(directory, "snapshot directory"))
    old = os.umask(0o077)
    try:
        if not out.is_dir():  # new: for its owner only; an empty one given keeps its mode
            out.mkdir(mode=0o700)
        for p in sr.listed or ():
            _inside(out, p).mkdir(mode=0o700, parents=True, exist_ok=True)
        n = 0
        for p, data in sr.recorded.items():
            kept = clean(p, data, environ)
            if kept is None:
                continue
            dest = _inside(out, p)
            dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # /proc/self is a symlink on the host; in a snapshot it is a plain directory.
            dest.write_bytes(kept)
            os.chmod(dest, 0o600)
            n += 1
        # a process's working directory and binary as the kernel named them: kept as a
        # private file holding the link's target (nothing in a snapshot points outside it;
        # SysRoot.readlink reads such a file back as the link)
        for p, target in (sr.links or {}).items():
            if _PROC_LINK.match(p):
                dest = _inside(out, p)
                dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                if not os.path.lexists(dest):
                    dest.write_text(redact_text(target))
                    os.chmod(dest, 0o600)
                    n += 1
        # a configuration directory's names are facts of their own (a unit enabled by its
        # link in a .wants directory): each name nothing else put there is kept as an empty
        # file (after the files read, so that no directory is taken for a name)
        for p, names in sr.names.items():
            for name in names:
                dest = _inside(out, f"{p}/{name}")
                if not dest.exists():
                    dest.touch(mode=0o600)
    finally:
        os.umask(old)
    return n
