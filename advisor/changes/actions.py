"""Every tunable as an Action with get / set / verify / restore, and the shell lines that
make the same change (`apply --print-script`).

An Action is rebuilt from its `spec()` (plain JSON) by `from_spec`, which is how `rollback`
restores what an earlier process changed. Engines add their own kinds (Engine.action_kinds),
usually on the two bases here that every database needs: `FileSetting` (a server setting kept
in a file, restored byte for byte) and `Restart`. Like TuneD's plugins, a get/set pair gives
dry-run, verify and rollback for free.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

from .action_base import (Action, ActionError, NotStopped, PathAction, _read,  # noqa: F401
                          _write, missing_dirs)
from ..kit.knob_id import read_choice
from ..kit.sizing import fmt_page
from ..kit.paths import sysfs_pool


class SysfsChoice(PathAction):
    """A THP knob such as /sys/kernel/mm/transparent_hugepage/enabled ('always [madvise] never')."""
    kind = "sysfs_choice"

    @property
    def label(self) -> str:
        return self.path.replace("/sys/kernel/mm/", "")

    def get(self) -> str:
        text = _read(self.path)
        chosen = read_choice(text).chosen
        return chosen if chosen is not None else text.strip()

    def set(self, value: str) -> None:
        _write(self.path, value)

    def invalid(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return f"{value!r} is not one of the knob's words"
        try:
            text = _read(self.path)
        except ActionError:
            return None  # unreadable here: restore says so itself
        c = read_choice(text)
        choices = list(c.words) if c.bracketed else None
        if choices is None:  # not a choice file as the kernel shows one: any word
            return None if re.fullmatch(r"[\w+]+", value) else f"{value!r} is not a word"
        return None if value in choices else f"{value!r} is not one of {', '.join(choices)}"

    def shell(self, new: str) -> list[str]:
        return [f"echo {shlex.quote(str(new))} > {self.path}"]


class Sysctl(PathAction):
    """A kernel setting under /proc/sys holding one integer, as facts/sysctls.py declares it
    (vm.zone_reclaim_mode, vm.hugetlb_shm_group): read, written, read back and put back as
    that integer."""
    kind = "sysctl"

    @property
    def label(self) -> str:
        return self.path.split("/proc/sys/", 1)[-1].replace("/", ".")

    def get(self) -> int:
        text = _read(self.path).strip()
        try:
            return int(text)
        except ValueError:
            raise ActionError(f"{self.path} reads {text!r}, not a number") from None

    def set(self, value: int) -> None:
        _write(self.path, str(int(value)))

    def invalid(self, value: Any) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else f"{value!r} is not a whole number"

    def shell(self, new: int) -> list[str]:
        return [f"echo {int(new)} > {self.path}"]


class Compact(PathAction):
    """Write 1 to /proc/sys/vm/compact_memory before growing a pool: it assembles the free
    contiguous blocks huge pages need (Documentation/admin-guide/sysctl/vm.rst). Not a
    setting, so there is nothing to restore."""
    kind = "compact"
    PATH = "/proc/sys/vm/compact_memory"

    def __init__(self, path: str = PATH):
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
        return f"{self.root}{sysfs_pool(self.size_kb, self.node)}"

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

    def invalid(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"{value!r} is not a page count"
        return None

    def restored(self, old: Any) -> str | None:
        """The persistent count reads `old`, and no page of the pool stays behind as surplus:
        pages still in use when a pool shrinks turn surplus and return to the kernel only when
        the process holding them lets go (mm/hugetlb.c, set_max_huge_pages). A shrink that
        stopped short under HVO is said as such (hugetlb_kernel.py)."""
        why = super().restored(old)
        if why:
            try:
                hvo = int(_read(f"{self.root}/proc/sys/vm/hugetlb_optimize_vmemmap")) == 1
            except (ActionError, ValueError):
                hvo = False
            if hvo and isinstance(old, int) and self.get() > old:
                why += (": with HugeTLB Vmemmap Optimization on, freeing a page must allocate "
                        "its struct pages again, and that fails under memory pressure "
                        "(sysctl vm.hugetlb_optimize_vmemmap); free some memory and roll back "
                        "again")
            return why
        overcommit = self.path.replace("/nr_hugepages", "/nr_overcommit_hugepages")
        try:
            surplus = int(_read(self.path.replace("/nr_hugepages", "/surplus_hugepages")))
            allowed = int(_read(overcommit)) if os.path.exists(overcommit) else 0
        except (ActionError, ValueError):
            return None
        if surplus and not allowed:
            return (f"{surplus} of its pages are still held by running processes (surplus: "
                    "they go back to the kernel when those processes let go of them)")
        return None

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

    def restored(self, old=None) -> str | None:
        """After a rollback's restart: None when the instance runs again (it need not be on
        huge pages now), else why not. Engines say how they know."""
        return None

    def running(self) -> bool | None:
        """Whether the instance runs now. Rollback restarts only one that does: a server its
        operator stopped stays stopped. None: the engine cannot tell (restarted as ever)."""
        return None

    def pid(self) -> int | None:
        """The instance's main process now, where the engine can tell. A restart whose spec
        holds "thp_mode" starts the server in that THP mode (numa.keep_of)."""
        return None

    def stopped(self) -> str:
        """What rollback says instead of restarting an instance that is not running."""
        return (f"{self.instance or self.label} is stopped: its restored settings take effect "
                "at its next start")

    def preflight(self) -> None:
        """Before anything stops: raise NotStopped when the instance would not come back
        (its configuration has errors). Engines ask the server's own parser, and hand its
        answer to `refuse_unless`."""

    def refuse_unless(self, ok: bool | None, why: str, what: str = "configuration") -> None:
        """The pre-flight's verdict: nothing to say when the server's parser accepted its
        configuration; NotStopped, in one line, when it rejected it or could not be asked."""
        if ok is False:
            raise NotStopped(f"{self.label}: not restarted, it would not start again: {why}; "
                             f"it runs on as it was: fix its {what} first")
        if ok is None:
            raise NotStopped(f"{self.label}: not restarted: cannot check that it would start "
                             f"again ({why}); restart it yourself")

    def describe(self, old, new) -> str:
        return self.label


# The file actions live in file_actions.py; they are part of this module's interface.
from .file_actions import Directory, File, FileSetting, Symlink  # noqa: E402,F401
from .unit_thp import UnitThp  # noqa: E402

KINDS: dict[str, type[Action]] = {c.kind: c for c in (SysfsChoice, Sysctl, Compact, Pool, File,
                                                      Symlink, Directory, UnitThp)}
