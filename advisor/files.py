"""Writing files so that a reader never sees half of one and a crash never loses one: the
new bytes go to a temporary file in the same directory, are fsynced, renamed over the old
name, and the directory is fsynced so that the rename itself is on disk (rename(2) is atomic
within a file system; fsync(2) on the directory persists the entry)."""

from __future__ import annotations

import os
import tempfile


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, mode: int = 0o644, uid: int | None = None,
                 gid: int | None = None) -> None:
    """Replace `path` with `data`: mode and owner as given (an owner only when root).
    Raises OSError; the temporary file never stays behind."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".hpadvise-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        if uid is not None and os.geteuid() == 0:
            os.chown(tmp, uid, gid if gid is not None else -1)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(d)
