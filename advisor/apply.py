"""`hpadvise apply`: turn a plan into journaled actions, run them, verify what took.

Order: pools (compacting before growth), THP, persistent files, engine settings, restart.
Every step reads the knob first and is skipped when it already has the value, so applying the
same plan twice changes nothing the second time.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from . import journal as jr
from .actions import Action, ActionError, Compact, File, Pool, SysfsChoice, Symlink, from_spec
from .engines import Engine, Instance
from .errors import InputError
from .plan import Report
from .sizing import fmt_bytes, fmt_page

THP_DIR = "/sys/kernel/mm/transparent_hugepage"
UNIT_NAME = "hpadvise-hugepages.service"


@dataclass
class Step:
    action: Action
    new: Any
    why: str
    phase: str  # runtime | persist | engine | restart
    old: Any = None
    error: str | None = None
    unread: str | None = None  # why the old value could not be read (plans made without root)
    # planned | done | unchanged (already so when its turn came) | failed | undone (rolled
    # back after a later step failed) | not reached
    status: str = "planned"

    @property
    def needed(self) -> bool:
        return self.error is None and (self.unread is not None
                                       or not self.action.same(self.old, self.new))


@dataclass
class ApplyPlan:
    report: Report
    instances: list[Instance]
    steps: list[Step]
    notices: list[str] = field(default_factory=list)
    restart_pending: list[str] = field(default_factory=list)

    @property
    def changes(self) -> list[Step]:
        return [s for s in self.steps if s.needed]


@dataclass
class Result:
    journal: str | None
    done: list[str]
    problems: list[str]
    status: str  # ok | nothing | shortfall | restart-failed | failed


def select_instances(report: Report, engines: list[str], wanted: str | list[str] | None,
                     ask: Callable[[list[Instance]], Instance] | None) -> list[Instance]:
    """The instances apply acts on: by ID, data directory or port (several may be named);
    with several engines and none named, every instance of them (one plan for the host);
    with one engine and several instances, ask (or refuse without a terminal)."""
    cands = [i for i in report.instances if i.engine in engines]
    names = [wanted] if isinstance(wanted, str) else list(wanted or [])
    if names:
        def match(i: Instance, w: str) -> bool:
            s = i.settings
            dd = s.get("data_directory")
            return w in (i.id, str(s.get("port", "")), dd, i.id.split(":", 1)[-1]) or (
                bool(dd) and os.path.realpath(w) == os.path.realpath(dd))
        out: list[Instance] = []
        for w in names:
            found = [i for i in cands if match(i, w)]
            if not found:
                known = ", ".join(i.id for i in cands) or "none found"
                raise InputError(f"no {'/'.join(engines)} instance {w!r} (instances: {known})")
            if found[0] not in out:
                out.append(found[0])
        return out
    if len(cands) > 1 and len(engines) == 1:
        if ask is None:
            raise InputError(f"{len(cands)} instances found ({', '.join(i.id for i in cands)}); "
                             "name one with --instance")
        return [ask(cands)]
    return cands


def prepare(report: Report, engines: dict[str, Engine], *, restart: bool, persist: bool,
            read_only: bool = False,
            sys_root: str = "", persist_root: str = "") -> ApplyPlan:
    ap = ApplyPlan(report, report.instances, [])
    if report.blocked:
        raise InputError("refusing to apply: " + "; ".join(report.blocked))
    if report.errors:
        raise InputError("refusing to apply while check reports errors: " + report.errors[0])
    host = report.host

    # 1. pools
    for pp in report.pools:
        pool = host.pool(pp.size_kb)
        claimed = pool.claimed_pages if pool else 0
        if pp.target_pages < claimed:
            raise InputError(
                f"refusing to shrink the {fmt_page(pp.size_kb)} pool to {pp.target_pages}: "
                f"{claimed} pages are in use or reserved by running processes")
        if pp.target_pages > (pp.current_pages or 0):
            ap.steps.append(Step(Compact(f"{sys_root}/proc/sys/vm/compact_memory"), True,
                                 "free contiguous memory first", "runtime", old=None))
        why = next((c.reason for c in report.changes
                    if c.target == f"hugepages-{pp.size_kb}kB/nr_hugepages"), "")
        if pp.per_node:  # NUMA: each node's pool, read back per node
            for node, pages in pp.per_node:
                ap.steps.append(Step(Pool(pp.size_kb, node=node, root=sys_root), pages,
                                     why or "per-node pool", "runtime"))
        else:
            ap.steps.append(Step(Pool(pp.size_kb, root=sys_root), pp.target_pages, why,
                                 "runtime"))
    # 2. THP
    for c in report.changes:
        if c.kind == "thp":
            ap.steps.append(Step(SysfsChoice(f"{sys_root}{THP_DIR}/{c.target.split('/')[1]}"),
                                 c.recommended, c.reason, "runtime"))
    # 3. persistence
    if persist:
        _persist(ap, persist_root)
    else:
        ap.notices.append("--no-persist: the runtime changes last until the next reboot.")
    # 4. engine settings, 5. restarts
    for inst in report.instances:
        eng = engines.get(inst.engine)
        if eng is None:
            continue
        ap.notices += eng.advice(inst, report.changes)
        acts = eng.actions(inst, report.changes)
        for a, value in acts:
            ap.steps.append(Step(a, value, "profile", "engine"))
        if inst.running and (acts or inst.backing != "hugetlb"):
            ra = eng.restart_action(inst)
            if ra is None:
                continue
            if restart:
                ap.steps.append(Step(ra, True, "huge pages are reserved when the server starts",
                                     "restart"))
            else:
                ap.restart_pending.append(inst.id)
    for s in ap.steps:
        try:
            s.old = s.action.get() if s.phase != "restart" else None
        except ActionError as exc:
            if not read_only:
                raise InputError(f"{exc}; nothing was changed") from None
            # A plan to print (--dry-run, --print-script) as a user who cannot read it all:
            # the step is kept, and the user is told what was assumed.
            s.unread = str(exc)
            ap.notices.append(f"assumed: {exc}, so its current value is unknown; the change "
                              "is planned without comparing (run as root to compare)")
    # a restart is only needed when something it depends on changes
    if not any(s.needed for s in ap.steps if s.phase != "restart"):
        for s in ap.steps:
            if s.phase == "restart" and _on_huge_pages(report, s):
                s.old = s.new
    return ap


def _on_huge_pages(report: Report, step: Step) -> bool:
    return any(i.id == step.action.instance and i.backing == "hugetlb"
               for i in report.instances)


def _persist(ap: ApplyPlan, root: str) -> None:
    """Files that make the runtime changes survive a reboot (docs/design.md, "Changing the system")."""
    from .boot import SYSCTL_LATE, SYSCTL_NAME, persistence
    from .plan import plan_knobs
    report, host = ap.report, ap.report.host
    knobs = plan_knobs(report)
    per = persistence(host.boot, knobs, host.default_hugepage_kb) if host.boot else None
    sysctl_name = per.sysctl_name if per else SYSCTL_NAME
    boot: list[tuple[str, str]] = []  # (sysfs path, value) that are not sysctls
    sysctl_lines = []
    for pp in report.pools:
        if pp.per_node:  # not expressible as a sysctl: per-node files at boot
            boot += [(f"/sys/devices/system/node/node{n}/hugepages/hugepages-{pp.size_kb}kB/"
                      "nr_hugepages", str(k)) for n, k in pp.per_node]
        elif pp.size_kb == host.default_hugepage_kb:
            # vm.nr_hugepages is the default size's pool (Documentation/admin-guide/sysctl/vm.rst)
            sysctl_lines.append(f"vm.nr_hugepages = {pp.target_pages}")
        else:
            boot.append((f"/sys/kernel/mm/hugepages/hugepages-{pp.size_kb}kB/nr_hugepages",
                         str(pp.target_pages)))
    p = report.profile
    changing = {c.target.split("/")[1] for c in report.changes if c.kind == "thp"}
    tuned = dict(per.tuned) if per else {}
    for knob in ("enabled", "defrag", "shmem_enabled"):
        want = knobs.get(f"thp.{knob}")  # the plan's value, resolved against the instances
        if want and f"thp.{knob}" not in tuned:  # not sysctls: a unit or the command line
            boot.append((f"{THP_DIR}/{knob}", want))
    if sysctl_lines:
        text = ("# Written by hpadvise apply (profile " + p.name + "); `hpadvise rollback` "
                "removes it.\n" + "\n".join(sysctl_lines) + "\n")
        why = "huge page pool at boot" + (
            " (named to sort after the sysctl files that also set it)"
            if sysctl_name != SYSCTL_NAME else "")
        ap.steps.append(Step(File(f"{root}/etc/sysctl.d/{sysctl_name}"), File.encode(text),
                             why, "persist"))
        other = SYSCTL_LATE if sysctl_name == SYSCTL_NAME else SYSCTL_NAME
        if os.path.exists(f"{root}/etc/sysctl.d/{other}"):  # an earlier apply's, now stale
            ap.steps.append(Step(File(f"{root}/etc/sysctl.d/{other}"), None,
                                 "replaced by " + sysctl_name, "persist"))
    if tuned:
        _tuned_profile(ap, root, host.boot, tuned)
    for key, value in host.cmdline_params:
        if key in ("hugepages", "hugepagesz", "default_hugepagesz", "transparent_hugepage",
                   "transparent_hugepage_shmem"):
            ap.notices.append(f"the kernel command line already has {key}={value}: it applies "
                              "at boot, before the settings persisted here")
    if not boot:
        return
    if os.path.isdir(f"{root}/run/systemd/system"):
        lines = "\n".join(f"ExecStart=/bin/sh -c 'echo {v} > {path}'" for path, v in boot)
        unit = (f"# Written by hpadvise apply (profile {p.name}); `hpadvise rollback` removes "
                "it.\n[Unit]\nDescription=hpadvise: huge page pools and THP\n"
                "DefaultDependencies=no\nBefore=sysinit.target\n\n[Service]\nType=oneshot\n"
                f"RemainAfterExit=yes\n{lines}\n\n[Install]\nWantedBy=sysinit.target\n")
        path = f"{root}/etc/systemd/system/{UNIT_NAME}"
        ap.steps.append(Step(File(path), File.encode(unit), "THP and pools at boot", "persist"))
        ap.steps.append(Step(Symlink(f"{root}/etc/systemd/system/sysinit.target.wants/"
                                     f"{UNIT_NAME}"), f"/etc/systemd/system/{UNIT_NAME}",
                             "enable the unit", "persist"))
        return
    grub = f"{root}/etc/default/grub"
    if os.path.isfile(grub):
        cur = File(grub).get()
        new, left = grub_cmdline(File.decode(cur) or "", boot)
        ap.steps.append(Step(File(grub), File.encode(new), "THP and pools at boot", "persist"))
        ap.notices.append("then run `" + _grub_update(root) + "` and reboot for the kernel "
                          "command line to take effect")
        boot = left
    for path, v in boot:
        if path.rsplit("/", 1)[1] in changing or "hugepages-" in path:
            ap.notices.append(f"not persisted (no systemd, no kernel command line parameter): "
                              f"add `echo {v} > {path}` to a boot script such as /etc/rc.local")


# Kernel parameters for boot-time values (Documentation/admin-guide/kernel-parameters.txt).
_CMDLINE_FOR = {f"{THP_DIR}/enabled": "transparent_hugepage",
                f"{THP_DIR}/shmem_enabled": "transparent_hugepage_shmem"}


def grub_cmdline(text: str, boot: list[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """GRUB_CMDLINE_LINUX with our parameters set (replacing earlier values of the same ones);
    returns the new file text and what the command line cannot express."""
    params, left = [], []
    gig = []
    per_node: dict[int, list[str]] = {}
    for path, v in boot:
        if (mn := re.search(r"node(\d+)/hugepages/hugepages-(\d+)kB/nr_hugepages$", path)):
            # kernel-parameters.txt, hugepages=: node format <node>:<integer>[,...]
            per_node.setdefault(int(mn.group(2)), []).append(f"{mn.group(1)}:{v}")
        elif path in _CMDLINE_FOR:
            params.append(f"{_CMDLINE_FOR[path]}={v}")
        elif (mt := re.search(r"hugepages-(\d+)kB/nr_hugepages$", path)):
            size = int(mt.group(1))
            gig.append((size, v))
        else:
            left.append((path, v))
    gig += [(size, ",".join(v)) for size, v in sorted(per_node.items())]
    mt = re.search(r'^GRUB_CMDLINE_LINUX="([^"]*)"', text, re.M)
    words = mt.group(1).split() if mt else []
    keys = {p.split("=")[0] for p in params}
    out, skip = [], False
    sizes = {("1G" if s == 1048576 else f"{s // 1024}M") for s, _ in gig}
    for w in words:
        k, _, v = w.partition("=")
        if skip:
            skip = False
            if k == "hugepages":
                continue
        if k in keys:
            continue
        if k == "hugepagesz" and v in sizes:
            skip = True
            continue
        out.append(w)
    for s, v in gig:
        out += [f"hugepagesz={'1G' if s == 1048576 else f'{s // 1024}M'}", f"hugepages={v}"]
    out += params
    line = f'GRUB_CMDLINE_LINUX="{" ".join(out)}"'
    if mt:
        text = text[:mt.start()] + line + text[mt.end():]
    else:
        text = text.rstrip("\n") + ("\n" if text else "") + line + "\n"
    return text, left


def _tuned_profile(ap: ApplyPlan, root: str, boot, knobs: dict[str, str]) -> None:
    """TuneD re-applies its active profile at every start, over what sysctl files and units
    set: the plan goes into a child profile that includes the active one and overrides just
    these knobs (tuned.conf(5): `include=`, then the [vm], [sysctl] and [sysfs] plugins), made
    the active profile the way tuned-adm records it (/etc/tuned/active_profile, profile_mode
    manual). Rollback restores both files."""
    from .boot import TUNED_PROFILE
    sections: dict[str, list[str]] = {}
    for knob, value in sorted(knobs.items()):
        if knob == "thp.enabled":
            sections.setdefault("vm", []).append(f"transparent_hugepages={value}")
        elif knob.startswith("thp."):
            sections.setdefault("sysfs", []).append(f"{THP_DIR}/{knob[4:]}={value}")
        elif knob == f"pool.{ap.report.host.default_hugepage_kb}":
            sections.setdefault("sysctl", []).append(f"vm.nr_hugepages={value}")
        else:
            sections.setdefault("sysfs", []).append(
                f"/sys/kernel/mm/hugepages/hugepages-{knob[5:]}kB/nr_hugepages={value}")
    parent = boot.tuned_profile if boot.tuned_profile != TUNED_PROFILE else \
        _tuned_parent(root)
    text = [f"# Written by hpadvise apply (profile {ap.report.profile.name}); `hpadvise "
            "rollback` restores the previous TuneD profile.", "[main]",
            f"summary=hpadvise: huge pages and THP over {parent}", f"include={parent}"]
    for sec, lines in sections.items():
        text += ["", f"[{sec}]", *lines]
    d = f"{root}/etc/tuned/{TUNED_PROFILE}"
    ap.steps.append(Step(File(f"{d}/tuned.conf"), File.encode("\n".join(text) + "\n"),
                         f"TuneD would re-apply {parent}'s values at its start", "persist"))
    ap.steps.append(Step(File(f"{root}/etc/tuned/active_profile"),
                         File.encode(TUNED_PROFILE + "\n"), "make it TuneD's profile",
                         "persist"))
    ap.steps.append(Step(File(f"{root}/etc/tuned/profile_mode"), File.encode("manual\n"),
                         "chosen by hand, as tuned-adm profile records it", "persist"))
    ap.notices.append(f"TuneD applies profile {TUNED_PROFILE} (over {parent}) at its next "
                      f"start; `tuned-adm profile {TUNED_PROFILE}` applies it now")


def _tuned_parent(root: str) -> str:
    """The profile hpadvise's own child profile includes (a second apply keeps it)."""
    try:
        with open(f"{root}/etc/tuned/hpadvise/tuned.conf") as f:
            mt = re.search(r"^include=(.+)$", f.read(), re.M)
            return mt.group(1).strip() if mt else "balanced"
    except OSError:
        return "balanced"


def _grub_update(root: str) -> str:
    try:
        osr = open(f"{root}/etc/os-release").read()
    except OSError:
        osr = ""
    ids = re.findall(r"^(?:ID|ID_LIKE)=\"?([^\"\n]+)", osr, re.M)
    if any(x in " ".join(ids) for x in ("debian", "ubuntu")):
        return "update-grub"
    return "grub2-mkconfig -o /boot/grub2/grub.cfg"


def describe(ap: ApplyPlan) -> list[str]:
    out = []
    for s in ap.changes:
        if s.unread:
            out.append(f"{s.action.label}: set (current value unknown: {s.unread})")
            continue
        out.append(s.action.describe(s.old, s.new) + (f"   # {s.why}" if s.why and
                                                       s.action.kind not in ("file",) else ""))
    return out


def execute(ap: ApplyPlan, directory: str, header: dict,
            say: Callable[[str], None] = lambda s: None) -> Result:
    """Run the steps under the lock, journaling each before it is made."""
    jr.open_dir(directory)
    with jr.Lock(directory):
        steps = [s for s in ap.steps if s.needed]
        if not steps:
            return Result(None, [], [], "nothing")
        j = jr.Journal.create(directory, header)
        done: list[str] = []
        for s in steps:
            s.status = "not reached"

        def fail(s: Step, status: str, msg: str, undo: bool = True) -> Result:
            s.status = "failed"
            if undo:
                _undo(j)
                for x in steps:
                    if x.status == "done" and x.phase != "restart":
                        x.status = "undone"
            j.finish(status, msg)
            return Result(j.id, done, [msg], status)

        for s in steps:
            if s.phase == "restart":
                msg = _restart(ap, j, s, say)
                if msg:
                    return fail(s, "restart-failed", msg, undo=False)
                s.status = "done"
                done.append(s.action.describe(None, None))
                continue
            old = s.action.get()  # fresh: the host may have moved since the plan was made
            s.old, s.unread = old, None
            if s.action.same(old, s.new):
                s.status = "unchanged"
                continue
            e = j.intent(s.action, old, s.new)
            say(f"{s.action.label} ...")
            try:
                s.action.set(s.new)
                ok, actual = s.action.verify(s.new)
            except ActionError as exc:
                j.done(e, None)
                return fail(s, "failed", f"{exc}; rolled back what this apply had changed")
            j.done(e, actual)
            if isinstance(s.action, Pool) and not ok:
                return fail(s, "shortfall", _shortfall(s, actual))
            if not ok:
                return fail(s, "failed", f"{s.action.label}: set {s.new!r} but reads back "
                                         f"{actual!r}")
            s.status = "done"
            if s.action.kind != "compact":
                done.append(s.action.describe(old, s.new) if s.action.kind != "file"
                            else f"wrote {s.action.label}")
        j.finish("ok")
        return Result(j.id, done, [], "ok")


def verify_boot(ap: ApplyPlan, persist_root: str) -> list[str]:
    """After an apply that persisted to the real /etc: read the boot sources again and compare
    the next boot's value of every planned knob with the plan. Each mismatch is one line."""
    if persist_root not in ("", "/"):
        return []  # persisted elsewhere (a test root): the host's boot is not the question
    from .boot import read as read_boot
    from .plan import plan_knobs
    from .sysroot import SysRoot
    host = ap.report.host
    b = read_boot(SysRoot("/"), host.default_hugepage_kb)
    out = []
    for knob, value in plan_knobs(ap.report).items():
        s = b.at_boot(knob)
        if s is None or s.value != value:
            got = f"{s.value} from {s.source}" if s else "nothing sets it"
            out.append(f"at next boot {knob} would be {got}, not the planned {value}")
    return out


def changes_json(ap: ApplyPlan) -> list[dict]:
    """Each change of the plan as `apply --format json` reports it: what, before, after, and
    its status. File contents are shown with secrets replaced."""
    from .secrets import redact_text

    def plain(action: Action, v: Any) -> Any:
        if action.kind == "file":
            text = File.decode(v)
            return None if text is None else redact_text(text)
        if isinstance(v, dict) and "value" in v:
            return v["value"]
        return v
    out = []
    for s in ap.steps:
        if not s.needed and s.status == "planned":
            continue
        a = s.action
        out.append({"target": a.label, "kind": a.kind, "instance": a.instance,
                    "phase": s.phase, "why": s.why,
                    "before": None if a.restart or s.unread else plain(a, s.old),
                    "before_unknown": s.unread,
                    "after": None if a.restart else plain(a, s.new), "status": s.status})
    return out


def _undo(j: jr.Journal) -> None:
    jr.rollback(j)
    j.mark_rolled_back([])


def _shortfall(s: Step, granted: int) -> str:
    a: Pool = s.action  # type: ignore[assignment]
    missing = s.new - granted
    size = "1G" if a.size_kb == 1048576 else f"{a.size_kb // 1024}M"
    return (f"the kernel granted {granted} of {s.new} {fmt_page(a.size_kb)} pages "
            f"({missing} missing, {fmt_bytes(missing * a.size_kb * 1024)}): free memory is too "
            f"fragmented or too small. Nothing was changed. Reserve them at boot instead: add "
            f"`hugepagesz={size} hugepages={s.new}` to the kernel command line")


def _restart(ap: ApplyPlan, j: jr.Journal, s: Step, say) -> str | None:
    """Restart and verify; on failure put the instance's previous settings back and start it
    again. Returns an error message or None."""
    e = j.intent(s.action, None, True)
    say(f"{s.action.label} ...")
    try:
        s.action.set(True)
    except ActionError as exc:
        j.done(e, "failed")
        restored = []
        for other in j.entries:
            if other.spec.get("instance") == s.action.instance \
                    and other.spec.get("kind") != s.action.kind:
                a = from_spec(other.spec)
                a.restore(other.old)
                restored.append(a.label)
        try:
            s.action.set(True)
            again = "it runs again with its previous settings"
        except ActionError as exc2:
            again = f"starting it again failed too: {exc2}"
        return (f"{exc}. Put back {', '.join(restored) or 'nothing'}; {again}. The pool and "
                "THP changes stay; `hpadvise rollback` undoes them")
    ok, actual = s.action.verify(True)
    j.done(e, actual)
    if not ok:
        return f"{s.action.label}: restarted, but {actual}"
    return None


def script(ap: ApplyPlan) -> str:
    """A shell script with the same changes, for someone who is root: each action renders its
    own lines, in the order apply makes them."""
    out = ["#!/bin/sh", "# Generated by hpadvise apply --print-script. Run as root.", "set -e"]
    for s in ap.changes:
        out.append(f"# {s.action.label}" + (f": {s.why}" if s.why else ""))
        out += s.action.shell(s.new)
    for n in ap.notices:
        out.append(f"# {n}")
    return "\n".join(out) + "\n"
