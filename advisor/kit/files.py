"""Every file hpadvise writes goes through here: what it may write, and how.

What: regular files only. A path is refused, in one line and before anything is written,
when it is empty, when it names a directory, a device, a FIFO or a socket, and when it is a
symbolic link the caller did not expect (`follow=True` resolves one to the regular file it
names: a configuration file that a package links, such as Debian's /etc/mysql/my.cnf).
Renaming a new file over /dev/null would replace the device for every program on the host;
writing through an unexpected link writes wherever it points.

How: the new bytes go to a temporary file in the same directory, are fsynced, renamed over
the old name, and the directory is fsynced so that the rename itself is on disk (rename(2)
is atomic within a file system; fsync(2) on the directory persists the entry).

Directories: hpadvise creates none here. A directory an apply needs is a change of its own
(actions.Directory), journaled and removed again by rollback.
"""

from __future__ import annotations

import os
import stat
import tempfile

from .errors import InputError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


class UnsafePath(InputError):
    """A path hpadvise must not write: the message says what it is and what to give."""


def kind_of(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return None if stat.S_ISREG(mode) else "not a regular file"


def target(path: str, what: str = "file", follow: bool = False) -> str:
    """The path to write for `path`: refused (UnsafePath) unless it is missing or a regular
    file, in an existing directory. A symbolic link is refused unless `follow`, which gives
    the regular file it resolves to."""
    if not path or not path.strip() or "\0" in path:
        raise UnsafePath(f"{what}: an empty path; give a file name")
    real = path
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UnsafePath(f"{what} {path}: {exc.strerror}") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        if not follow:
            raise UnsafePath(f"{what} {path} is a symbolic link (to {os.readlink(path)}); "
                             "give the file it points to, or another path")
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
        except FileNotFoundError:
            raise UnsafePath(f"{what} {path} is a dangling symbolic link (to "
                             f"{os.readlink(path)}); fix or remove the link") from None
    if st is not None and (words := kind_of(st.st_mode)) is not None:
        raise UnsafePath(f"{what} {path} is {words}, not a regular file; hpadvise writes "
                         "regular files only: give a file path (or leave the option out to "
                         "print)")
    parent = os.path.dirname(os.path.abspath(real))
    if not os.path.isdir(parent):
        raise UnsafePath(f"{what} {path}: directory {parent} does not exist; create it first "
                         "or give another path")
    return real


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, mode: int = 0o644, uid: int | None = None,
                 gid: int | None = None, follow: bool = False) -> None:
    """Replace `path` (checked by `target`) with `data`: mode and owner as given (an owner
    only when root). Raises UnsafePath or OSError; the temporary file never stays behind."""
    path = target(path, follow=follow)
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


def new_directory(path: str, what: str = "directory") -> str:
    """A directory path to create for output (a snapshot): refused unless it is missing or
    an empty directory, in an existing parent."""
    if not path or not path.strip() or "\0" in path:
        raise UnsafePath(f"{what}: an empty path; give a directory name")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise UnsafePath(f"{what} {path}: directory {parent} does not exist; create it "
                             "first or give another path") from None
        return path
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{what} {path} is a symbolic link; give a new directory path")
    if not stat.S_ISDIR(st.st_mode) or os.listdir(path):
        raise UnsafePath(f"{path} exists and is not an empty directory; give a new path")
    return path
