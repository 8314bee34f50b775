"""Run a command in a new user namespace whose ids are shifted, as rootless and userns-remapped
container runtimes run a server: root stays root ("0 0 1"), and every other id n is the host's
SHIFT + n ("1 SHIFT+1 65535"), so a root's `mysql`, uid 999 inside, is the host's 100999.

util-linux's `unshare --map-users` goes through newuidmap, which allows only the ranges the
host's /etc/subuid grants; as root, the maps are written directly instead
(user_namespaces(7): a process with CAP_SETUID in the parent namespace may map any ids):
    python3 tests/userns.py COMMAND [ARG...]
The command runs as root of the new namespace; it exits with the command's status."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

SHIFT = 100000
CLONE_NEWUSER = 0x10000000  # include/uapi/linux/sched.h
MAP = f"0 0 1\n1 {SHIFT + 1} 65535\n"


def shift_owners(*tops):
    """Give every file under the tops the owners a runtime with this namespace's map gives the
    files of an image it unpacks: an id n between 1 and SHIFT becomes SHIFT + n (an unmapped
    owner is nobody inside, where the server cannot write); root stays root. Returns the
    function that gives the old owners back, for trees that outlive the test (a shared root)."""
    was = []
    for top in map(Path, tops):
        for p in [top, *top.rglob("*")] if os.path.lexists(top) else []:
            st = os.lstat(p)
            if 0 < st.st_uid < SHIFT or 0 < st.st_gid < SHIFT:
                was.append((p, st.st_uid, st.st_gid))
                os.lchown(p, *(SHIFT + i if 0 < i < SHIFT else i
                               for i in (st.st_uid, st.st_gid)))

    def restore() -> None:
        for p, uid, gid in was:
            if os.path.lexists(p):
                os.lchown(p, uid, gid)
    return restore


def main(argv: list[str]) -> int:
    ready_r, ready_w = os.pipe()  # the child has its namespace
    mapped_r, mapped_w = os.pipe()  # the parent has written its maps
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(mapped_w)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUSER) != 0:
            os.write(2, f"userns.py: unshare: {os.strerror(ctypes.get_errno())}\n".encode())
            os._exit(125)
        os.write(ready_w, b"u")
        if os.read(mapped_r, 1) != b"m":
            os._exit(125)
        os.execvp(argv[0], argv)
    os.close(ready_w)
    os.close(mapped_r)
    if os.read(ready_r, 1) != b"u":
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    for kind in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{kind}", "w") as f:
            f.write(MAP)
    os.write(mapped_w, b"m")
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
