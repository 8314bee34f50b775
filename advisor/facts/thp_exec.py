"""Per-process THP: a server started with prctl(PR_SET_THP_DISABLE) gets THP as its own
policy says, whatever the host-wide mode, so one host can give MongoDB or a JVM `always` and
keep PostgreSQL or Redis to what they ask for.

Facts (include/uapi/linux/prctl.h, kernel/sys.c, Documentation/admin-guide/mm/transhuge.rst):
- PR_SET_THP_DISABLE (41) with arg2 = 1 turns THP off for the calling process; with arg3 =
  PR_THP_DISABLE_EXCEPT_ADVISED (1 << 1, Linux 6.18) only where the process did not ask for
  it with madvise(MADV_HUGEPAGE) or MADV_COLLAPSE. Older kernels refuse arg3 with EINVAL.
- PR_GET_THP_DISABLE (42) returns 0 (not set), 1 (off) or 3 (off except advised).
- The flag is kept across fork() and execve(): a server started under it, and every process
  it forks, keep it. It cannot be set on another, running process: it takes effect at the
  server's next start under it.
- /proc/PID/status `THP_enabled` reads 0 only for the whole-process off; the except-advised
  mode reads 1 (measured on 6.18), and shows in smaps as THPeligible 0 on the process's
  mappings that did not ask, where the host mode would have given them THP.
- systemd (v260+) sets the same for a unit: MemoryTHP=disable or MemoryTHP=madvise
  (changes/unit_thp.py writes it where a server runs as a unit).
"""

from __future__ import annotations

import ctypes
import errno
import os
import re

from ..kit.errors import InputError
from .thp_knobs import kernel_version

PR_SET_THP_DISABLE, PR_GET_THP_DISABLE = 41, 42
PR_THP_DISABLE_EXCEPT_ADVISED = 1 << 1
# mode -> (arg2, arg3) of PR_SET_THP_DISABLE, and what PR_GET_THP_DISABLE returns then
MODES = {"inherit": (0, 0), "never": (1, 0), "advised": (1, PR_THP_DISABLE_EXCEPT_ADVISED)}
BY_GET = {0: "inherit", 1: "never", 3: "advised"}
# what a systemd unit says for each mode (systemd.exec(5), MemoryTHP=)
SYSTEMD = {"never": "disable", "advised": "madvise", "inherit": "inherit"}


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    r = libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(arg3),
                   ctypes.c_ulong(0), ctypes.c_ulong(0))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def mode_now() -> str:
    """This process's own THP mode."""
    return BY_GET.get(_prctl(PR_GET_THP_DISABLE), "unknown")


def set_mode(mode: str) -> None:
    """Set this process's THP mode (kept by what it execs and forks). InputError where the
    mode is unknown or the kernel does not have it."""
    if mode not in MODES:
        raise InputError(f"THP mode {mode!r}: give one of {', '.join(MODES)}")
    try:
        _prctl(PR_SET_THP_DISABLE, *MODES[mode])
    except OSError as exc:
        if exc.errno == errno.EINVAL and mode == "advised":
            raise InputError(
                f"this kernel ({os.uname().release}) has no THP mode 'advised' "
                "(PR_THP_DISABLE_EXCEPT_ADVISED came with Linux 6.18): use 'never', or "
                "keep the host-wide mode") from None
        raise InputError(f"prctl(PR_SET_THP_DISABLE) failed: {exc.strerror}") from None
    got = mode_now()
    if got != mode:
        raise InputError(f"THP mode {mode} asked, the kernel reports {got}")


def supported() -> tuple[str, ...]:
    """The modes this kernel offers, probed in a child (the probe's flag stays there)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        try:
            _prctl(PR_SET_THP_DISABLE, *MODES["advised"])
            os._exit(0)
        except OSError:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return tuple(MODES) if os.waitstatus_to_exitcode(status) == 0 \
        else ("inherit", "never")


def exec_under(mode: str, argv: list[str]) -> None:
    """Replace this process with argv, in THP mode `mode`."""
    if not argv:
        raise InputError("name the command to run after --, e.g. "
                         "hpadvise thp-exec --mode advised -- pg_ctl -D DIR start")
    set_mode(mode)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        raise InputError(f"cannot run {argv[0]}: {exc.strerror}") from None


def wrapped(mode: str, argv: list[str]) -> list[str]:
    """The command line that starts argv in THP mode `mode` (for a unit or a script)."""
    return ["hpadvise", "thp-exec", "--mode", mode, "--", *argv]


# ---- another process's mode, as /proc shows it ---------------------------------------------

# a mapping's head line, and the two fields that say whether THP may back it (proc.rst:
# THPeligible, VmFlags "hg" for MADV_HUGEPAGE, "nh" for MADV_NOHUGEPAGE)
_HEAD = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S\S\S(\S) \S+ \S+ (\d+)[ \t]*(.*)$", re.M)
_ELIGIBLE = re.compile(r"^THPeligible:\s+(\d)", re.M)
_FLAGS = re.compile(r"^VmFlags:(.*)$", re.M)


def process_mode(status: str | None, smaps: str | None, gives_unadvised: bool,
                 pmd_kb: int | None) -> str | None:
    """A running process's THP mode: "never" where it switched THP off (THP_enabled: 0),
    "advised" or "inherit" from its private anonymous mappings that hold a PMD-aligned PMD
    and never asked (neither madvise flag): under a host mode that gives such memory THP
    (`gives_unadvised`) they are THPeligible unless the process is in the except-advised
    mode. None where it cannot be told (the host gives unadvised memory no THP, so the two
    modes differ in nothing now, or nothing was readable)."""
    if status is None:
        return None
    if re.search(r"^THP_enabled:\s*0", status, re.M):
        return "never"
    if not gives_unadvised or not smaps or not pmd_kb:
        return None
    heads = list(_HEAD.finditer(smaps))
    seen = []
    for n, h in enumerate(heads):
        # THP needs a whole PMD-aligned range inside the mapping (THPeligible is 0 otherwise)
        pmd = pmd_kb * 1024
        start, end = int(h.group(1), 16), int(h.group(2), 16)
        if h.group(3) != "p" or h.group(4) != "0" or (end // pmd) * pmd - -(-start // pmd) * pmd \
                < pmd or h.group(5).strip() not in ("", "[heap]"):
            continue
        end = heads[n + 1].start() if n + 1 < len(heads) else len(smaps)
        flags = _FLAGS.search(smaps, h.end(), end)
        eligible = _ELIGIBLE.search(smaps, h.end(), end)
        if flags is None or eligible is None or {"hg", "nh"} & set(flags.group(1).split()):
            continue
        seen.append(eligible.group(1) == "1")
    if not seen:
        return None
    return "inherit" if any(seen) else "advised"


_ANON_HUGE = re.compile(r"^AnonHugePages:\s+(\d+) kB", re.M)


def unadvised_thp_kb(smaps: str | None) -> int:
    """THP (kB) on a process's mappings that did not madvise() for it: what a host-wide mode
    lowered below `always` stops giving its new memory (transhuge.rst)."""
    heads = list(_HEAD.finditer(smaps or ""))
    total = 0
    for n, h in enumerate(heads):
        end = heads[n + 1].start() if n + 1 < len(heads) else len(smaps or "")
        flags = _FLAGS.search(smaps, h.end(), end)
        huge = _ANON_HUGE.search(smaps, h.end(), end)
        if huge and int(huge.group(1)) and not (flags and "hg" in flags.group(1).split()):
            total += int(huge.group(1))
    return total


def kernel_has_advised(release: str | None) -> bool:
    """PR_THP_DISABLE_EXCEPT_ADVISED: Linux 6.18 and later."""
    v = kernel_version(release)
    return v is not None and v >= (6, 18)

