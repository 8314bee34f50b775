"""What a running server's error log says of it since its start (the lines after its "as
process PID" line): the large-page fallbacks it logged, and its version in its "ready for
connections. Version: '...'" line (sql/mysqld.cc)."""

from __future__ import annotations

import re

from hpadvise.api.face import SysRoot

from .conf import FALLBACK_RE
from .state import Server

# MySQL logs it on its "ready for connections" line, MariaDB on the line after that one
VERSION_RE = re.compile(r"(?:^|ready for connections\.?\s+)Version: '([^']+)'")


def _since_start(sr: SysRoot, server: Server) -> list[str] | None:
    """The log's lines since the server's start, or None when the error log is not a
    readable file. The tail only: an error log can be gigabytes; startup lines of the
    running process follow its "as process PID" line, which a server that has logged 8 MiB
    since is unlikely to have pushed out (smaps remains the evidence then)."""
    path = server.log_error
    if not path:
        return None
    text = (server.fs or sr).read_tail(path, 8 << 20, quiet_missing=True)
    if text is None:
        return None
    lines = text.splitlines()
    start = 0
    if server.pid:  # the PID it logs is its own namespace's
        for n in range(len(lines) - 1, -1, -1):
            if f"as process {server.ns_pid or server.pid}" in lines[n]:
                start = n
                break
    return lines[start:]


def fallback_lines(sr: SysRoot, server: Server) -> list[str] | None:
    """Fallback warnings the server logged since it started, or None (log unreadable)."""
    lines = _since_start(sr, server)
    return None if lines is None else [ln for ln in lines if FALLBACK_RE.search(ln)]


def logged_version(sr: SysRoot, server: Server) -> str | None:
    """The version the server logged when it became ready, or None."""
    for ln in reversed(_since_start(sr, server) or []):
        m = VERSION_RE.search(ln)
        if m:
            return m.group(1)
    return None
