"""Would a MySQL/MariaDB server start again with its option files as they are now? Asked of the
server's own binary before anything stops it, and by check when an option file changed after
the server started.

`mysqld --help --verbose` with the server's own arguments reads every option file and the
command line the way a start does, then prints the variables instead of starting: an unknown
variable ends it with "[ERROR] ... unknown variable" and exit 7; a value its variable rejects
is an "[ERROR] ... Error while setting value" line (measured on MariaDB 10.11: exit 0 then, so
the [ERROR] lines are read as well). MySQL 8.0.16+ has --validate-config for the same; --help
--verbose serves both flavours (MySQL Reference Manual, "Server Configuration Validation";
MariaDB docs, "mariadbd Options": --help --verbose).
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess

_ERROR = re.compile(r"\[ERROR\]\s*(.*)")


def would_start(argv: tuple[str, ...] | list[str], exe: str | None, owner: str | None
                ) -> tuple[bool | None, str]:
    """(True, "") when the server's parser accepts its option files and command line; (False,
    why) when it does not; (None, why) when it could not be asked."""
    binary = exe or (argv[0] if argv else None)
    if not binary or not os.access(binary, os.X_OK):
        return None, "no server binary to check its option files with"
    kw: dict = {"cwd": "/"}
    if os.geteuid() == 0 and owner and owner != "root":
        try:
            pw = pwd.getpwnam(owner)
        except KeyError:
            return None, f"no user {owner} to check its option files as"
        kw.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
    try:
        r = subprocess.run([binary, *argv[1:], "--help", "--verbose"], capture_output=True,
                           text=True, timeout=60, **kw)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{binary} --help --verbose could not run: {exc}"
    errors = [m.group(1).strip() for m in map(_ERROR.search, r.stderr.splitlines()) if m]
    if r.returncode != 0 or errors:
        return False, "; ".join(errors)[:400] or r.stderr.strip()[-300:]
    return True, ""
