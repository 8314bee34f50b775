"""THP in the plan, as Linux 6.x decides it per size, per mapping and per process (the rules
themselves: thp_rules.py): which per-size knobs to change, whether shmem_enabled may go below
advise, which servers get a THP mode of their own, and who loses THP it holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..kit.findings import CORE
from ..kit.knob_id import SIZE_FILES, KnobId
from ..kit.paths import THP_DIR
from ..api.model import Change
from ..kit.sizing import fmt_bytes, fmt_page
from ..facts.thp_exec import SYSTEMD
from ..facts.thp_rules import ADVISED, RANK, ThpUser

if TYPE_CHECKING:
    from ..api.model import Report


# ---- who uses shared-memory THP now ---------------------------------------------------------

def shmem_need(users: tuple[ThpUser, ...]) -> tuple[set[str], str] | None:
    """What shmem_enabled must stay at while these processes run: a memfd or shmem THP user
    (ZGC's heap, for one) got its huge pages through madvise under `advise` or better, and
    loses them at its next fault or restart under `never` (transhuge.rst, shmem_enabled).
    FilePmdMapped users are counted too: `advise` costs nothing to processes that do not ask."""
    if not users:
        return None
    who = ", ".join(f"pid {u.pid} ({u.comm}): "
                    + " + ".join(f"{fmt_bytes(kb * 1024)} {w}" for kb, w in (
                        (u.shmem_pmd_kb, "ShmemPmdMapped"), (u.file_pmd_kb, "FilePmdMapped"))
                        if kb)
                    for u in users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
    return set(ADVISED["shmem_enabled"]), f"shared memory on THP now: {who}"


# ---- the per-size knobs in the plan ---------------------------------------------------------

def plan_sizes(r: Report, planned: dict[str, str | None]) -> None:
    """Per-size knobs that would defeat the planned top-level mode: a finding for each, and a
    change back to the plan. The PMD size goes back to `inherit` (its fresh value: it then
    follows the plan); another size keeps its own knob, lowered to the planned mode, so a
    deliberate mTHP choice within the plan stays (transhuge.rst)."""
    t, p = r.host.thp, r.profile
    for knob in SIZE_FILES:
        top = planned.get(knob)
        want_top = p.thp_wants(knob)
        rank = RANK[knob]
        if top is None or want_top == "keep" or top not in rank:
            continue
        for kb, d in sorted(t.mthp.items()):
            cur = d.get(knob)
            if cur in (None, "inherit"):
                continue
            pmd = kb == t.pmd_size_kb
            if pmd and cur != top:
                want = "inherit"
            elif rank.get(cur, 0) > rank[top]:
                want = {"deny": "never", "force": "always"}.get(top, top)  # no such size modes
            else:
                continue
            name = KnobId.thp(knob, kb).thp_path
            mem = "anonymous" if knob == "enabled" else "shared"
            more = rank.get(cur, 0) > rank[top]
            gets = {"always": f"every {mem} mapping gets", "force": f"every {mem} mapping gets",
                    "within_size": f"{mem} files get", "madvise": "madvise()d ranges get",
                    "advise": "madvise()d ranges get"}.get(cur, "nothing gets")
            r.findings.append(CORE["thp.size_override"](
                f"A size not at inherit follows its own knob whatever the top level says "
                f"(transhuge.rst): {gets} {fmt_page(kb)} THP"
                + (" although the top level says " if more else " where the plan gives ")
                + f"{top}. The plan sets it to {want}.",
                f"{THP_DIR}/{name} = {cur}; {knob} planned {top}",
                title=f"THP {name} = {cur} overrides {knob} = {top} for {fmt_page(kb)} pages",
                severity="warn" if cur in ("always", "force") and more else "info"))
            r.changes.append(Change(
                "thp", f"transparent_hugepage/{name}", cur, want,
                f"per-size override of {knob} (planned {top})", knob=name,
                id=KnobId.thp(knob, kb)))


# ---- a THP mode of their own, for servers the host-wide mode gives more than they want -----

# how much THP each process mode lets through (thp_exec.py), most first
LETS = {"inherit": 2, "advised": 1, "never": 0}


def own_mode(acceptable: set[str], kernel: str | None) -> str | None:
    """The process mode that keeps a server within `acceptable` (values of `enabled`)
    whatever the host-wide mode: "advised" where it accepts madvise and the kernel has that
    mode (6.18), "never" where it accepts never; None where neither does."""
    from ..facts.thp_exec import kernel_has_advised
    if "madvise" in acceptable and kernel_has_advised(kernel):
        return "advised"
    return "never" if "never" in acceptable else None


def kept_by_itself(mode: str | None, acceptable: set[str]) -> bool:
    """A server whose own mode already keeps it within `acceptable`: the host-wide value does
    not reach the memory it did not madvise()."""
    return (mode == "never" and "never" in acceptable) or \
        (mode == "advised" and bool({"madvise", "never"} & acceptable))


def process_changes(r: Report, planned: str, wishes: list[tuple[object, set[str], str]]) -> None:
    """A THP mode of its own for each running server whose wish (values of `enabled` it can
    live with, and why) the planned host-wide `enabled` is not among: a finding and a change
    (kind "process_thp", made by restarting it in that mode), or, where no mode can keep it
    there, a warning that says so."""
    given: set[str] = set()
    for inst, ok, why in wishes:
        if planned in ok or not getattr(inst, "running", False) \
                or kept_by_itself(inst.thp_mode, ok) or inst.id in given:
            continue
        given.add(inst.id)
        mode = own_mode(ok, r.host.kernel)
        if mode is None:
            r.findings.append(CORE["thp.per_process"](
                f"enabled = {planned} reaches {inst.id}, and no THP mode of its own keeps it "
                f"to {' or '.join(sorted(ok))} on this kernel ({r.host.kernel}): "
                "the advised-only mode came with Linux 6.18.", why, inst.id, severity="warn",
                title=f"{inst.id} gets THP enabled = {planned}"))
            continue
        r.findings.append(CORE["thp.per_process"](
            f"The host keeps enabled = {planned} for the servers that need it; {inst.id} is "
            f"restarted in THP mode {mode} (prctl, kept by the server and its children), so "
            + ("it gets THP only where it asks with madvise" if mode == "advised"
               else "it gets no THP") + ". A server that runs as a systemd unit gets it "
            f"from a drop-in, MemoryTHP={SYSTEMD[mode]} (systemd v260 and later), which "
            "apply writes before its restart; the alternative is one host-wide value, with "
            "the cost to the server that needs more.",
            f"{why}; {inst.id} runs in THP mode {inst.thp_mode or 'inherit (or not seen)'}",
            inst.id, title=f"{inst.id}: THP mode {mode} of its own under enabled = {planned}"))
        r.changes.append(Change("process_thp", f"{inst.id} THP mode", inst.thp_mode or "inherit",
                                mode, f"enabled = {planned} gives it more than {why}",
                                instance=inst.id, restart=True))


def own_modes(r: Report) -> None:
    """A finding for each server that runs in a THP mode of its own now."""
    for inst in r.instances:
        if inst.running and inst.thp_mode in ("never", "advised"):
            r.findings.append(CORE["thp.own_mode"](
                "Its memory gets THP only where it asks with madvise, whatever enabled says."
                if inst.thp_mode == "advised" else "Its memory gets no THP at all, whatever "
                "enabled says (a madvise() is refused too).",
                f"/proc/{inst.pid}/status, smaps" + (" (THP_enabled: 0)"
                                                     if inst.thp_mode == "never" else
                                                     " (THPeligible 0 where it did not ask)"),
                inst.id, title=f"{inst.id} runs in THP mode {inst.thp_mode} of its own"))


def taken(r: Report, planned: str | None) -> None:
    """A plan that lowers `enabled` from always takes THP from memory servers did not madvise:
    each server that holds such THP now is named, with how much (its new memory gets 4 KiB
    pages from the change on; what it holds stays until it is freed or split)."""
    cur = r.host.thp.enabled.value
    if cur != "always" or planned in (None, "always"):
        return
    for inst in r.instances:
        kb = inst.thp_unadvised_kb or 0
        if inst.running and kb and inst.thp_mode not in ("never", "advised"):
            r.findings.append(CORE["thp.taken"](
                f"It holds {fmt_bytes(kb * 1024)} of THP in memory it did not madvise(); with "
                f"enabled = {planned} its new memory of that kind gets 4 KiB pages (what it "
                "holds stays until freed or split). Where it needs them, keep always for the "
                "host and give the others a THP mode of their own (a profile's engine key "
                "`thp`).", f"/proc/{inst.pid}/smaps: AnonHugePages without madvise",
                inst.id, title=f"{inst.id} loses THP it has now under enabled = {planned}"))
