"""The lock that keeps two applies or rollbacks (or a capture) from changing the host at once:
one per journal directory."""

from __future__ import annotations

import fcntl
import os

from .errors import InputError


class Lock:
    """An exclusive flock on <dir>/lock: the kernel drops it when the holder dies, so a
    killed apply never leaves a stale lock."""

    def __init__(self, directory: str):
        self.path = os.path.join(directory, "lock")
        self.fd: int | None = None

    def __enter__(self) -> Lock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 32, 0).decode().strip() or "?"
            os.close(self.fd)
            self.fd = None
            raise InputError(f"another hpadvise apply or rollback is running (pid {holder}); "
                             "wait for it to finish") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = None
