"""Persistence: the files that make apply's runtime changes survive a reboot
(docs/design.md, "Changing the system"). vm.nr_hugepages and the declared settings
(facts/sysctls.py) are sysctls, in one drop-in; THP and pools of other sizes or per node are
not sysctls, so they go into a systemd unit, the kernel command line, or a TuneD child profile
where TuneD would otherwise re-apply its own values; what none of these can carry is said as
a notice."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..changes.actions import File, Symlink
from ..nextboot.boot_persist import (SYSCTL_LATE, SYSCTL_NAME, TUNED_PROFILE, UNIT_NAME, own,
                                     persistence, tuned_home)
from ..kit.knob_id import THP_FILES, KnobId
from ..nextboot.boot_plan import plan_knobs
from ..facts.host import CMDLINE_SETS_BOOT
from ..facts.thp_knobs import THP
from ..kit.paths import knob_path, sysfs_pool
from ..kit.sizing import cmdline_size
from .steps import ApplyPlan, Step



@dataclass(frozen=True)
class BootValue:
    """A value to set at every boot that is not a sysctl: a pool (of one size, or one NUMA
    node's share of it) or a THP knob."""
    value: str
    size_kb: int | None = None
    node: int | None = None
    thp: KnobId | None = None

    @property
    def path(self) -> str:
        return sysfs_pool(self.size_kb, self.node) if self.size_kb is not None \
            else knob_path(self.thp)


def persist_steps(ap: ApplyPlan, root: str) -> None:
    """Files that make the runtime changes survive a reboot (docs/design.md, "Changing the system")."""
    report, host = ap.report, ap.report.host
    knobs = plan_knobs(report)
    per = persistence(host.boot, knobs, host.default_hugepage_kb) if host.boot else None
    sysctl_name = per.sysctl_name if per else SYSCTL_NAME
    boot: list[BootValue] = []  # what is not a sysctl
    sysctl_lines = []
    for pp in report.pools:
        if pp.per_node:  # not expressible as a sysctl: per-node files at boot
            boot += [BootValue(str(k), size_kb=pp.size_kb, node=n) for n, k in pp.per_node]
        elif pp.size_kb == host.default_hugepage_kb:
            # vm.nr_hugepages is the default size's pool (Documentation/admin-guide/sysctl/vm.rst)
            sysctl_lines.append(f"vm.nr_hugepages = {pp.target_pages}")
        else:
            boot.append(BootValue(str(pp.target_pages), size_kb=pp.size_kb))
    # the declared sysctls the plan sets (facts/sysctls.py), in the same drop-in
    sysctl_lines += [f"{k.file} = {v}" for k, v in knobs.items()
                     if k.is_sysctl and not (per and k in per.tuned)]
    # and those an earlier apply persisted that this plan does not decide (an apply for other
    # instances than the SysV huge page users): kept, not dropped from the rewritten drop-in
    sysctl_lines += [f"{s.knob.file} = {s.value}" for s in (
        host.boot.setters if host.boot else ()) if own(s) and s.stage == 1
        and s.knob.is_sysctl and s.knob not in knobs]
    p = report.profile
    changing = {c.id for c in report.changes if c.kind == "thp"}
    tuned = dict(per.tuned) if per else {}
    ids = [KnobId.thp(f) for f in THP_FILES] + [k for k in knobs if k.per_size]
    for k in ids:
        want = knobs.get(k)  # the plan's value, resolved against the instances
        if want and k not in tuned:  # not sysctls: a unit or the command line
            boot.append(BootValue(want, thp=k))
    if sysctl_lines:
        text = ("# Written by hpadvise apply (profile " + p.name + "); `hpadvise rollback` "
                "removes it.\n" + "\n".join(sysctl_lines) + "\n")
        pool, more = sysctl_lines[0].startswith("vm.nr_hugepages "), len(sysctl_lines) > 1
        why = ("huge page pool" if pool else "") + (" and " if pool and more else "") + (
            "kernel settings" if more or not pool else "") + " at boot" + (
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
    elif knobs and host.boot and host.boot.tuned_refused:
        ap.notices.append(f"{host.boot.tuned_refused}: the settings persist as where TuneD "
                          "is absent; once TuneD takes its profile again, apply again to "
                          "persist them through it")
    for key, value in host.cmdline_params:
        if key in CMDLINE_SETS_BOOT:
            ap.notices.append(f"the kernel command line already has {key}={value}: it applies "
                              "at boot, before the settings persisted here")
    if not boot:
        return
    if os.path.isdir(f"{root}/run/systemd/system"):
        lines = "\n".join(f"ExecStart=/bin/sh -c 'echo {b.value} > {b.path}'" for b in boot)
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
        new, left = grub_cmdline(File.decode(cur) or "", boot,
                                 host.boot.kernel if host.boot else None)
        ap.steps.append(Step(File(grub), File.encode(new), "THP and pools at boot", "persist"))
        ap.notices.append("then run `" + _grub_update(root) + "` and reboot for the kernel "
                          "command line to take effect")
        boot = left
    for b in boot:
        if b.size_kb is not None or b.thp in changing:
            ap.notices.append(f"not persisted (no systemd, no kernel command line parameter): "
                              f"add `echo {b.value} > {b.path}` to a boot script such as "
                              "/etc/rc.local")


def grub_cmdline(text: str, boot: list[BootValue], kernel: tuple[int, int] | None = None
                 ) -> tuple[str, list[BootValue]]:
    """GRUB_CMDLINE_LINUX with our parameters set (replacing earlier values of the same ones);
    returns the new file text and what the command line cannot express: among it a THP file
    without a kernel parameter (defrag), or whose parameter `kernel` predates (thp_knobs.py)."""
    cmdline_for = {KnobId.thp(f): t.cmdline for f, t in THP.items() if t.takes_cmdline(kernel)}
    params, left = [], []
    gig: list[tuple[int, str]] = []
    per_node: dict[int, list[str]] = {}
    for b in boot:
        if b.size_kb is not None and b.node is not None:
            # kernel-parameters.txt, hugepages=: node format <node>:<integer>[,...]
            per_node.setdefault(b.size_kb, []).append(f"{b.node}:{b.value}")
        elif b.size_kb is not None:
            gig.append((b.size_kb, b.value))
        elif b.thp in cmdline_for:
            params.append(f"{cmdline_for[b.thp]}={b.value}")
        else:
            left.append(b)
    gig += [(size, ",".join(v)) for size, v in sorted(per_node.items())]
    mt = re.search(r'^GRUB_CMDLINE_LINUX="([^"]*)"', text, re.M)
    words = mt.group(1).split() if mt else []
    keys = {p.split("=")[0] for p in params}
    out, skip = [], False
    sizes = {cmdline_size(s) for s, _ in gig}
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
        out += [f"hugepagesz={cmdline_size(s)}", f"hugepages={v}"]
    out += params
    line = f'GRUB_CMDLINE_LINUX="{" ".join(out)}"'
    if mt:
        text = text[:mt.start()] + line + text[mt.end():]
    else:
        text = text.rstrip("\n") + ("\n" if text else "") + line + "\n"
    return text, left


def _tuned_profile(ap: ApplyPlan, root: str, boot, knobs: dict[KnobId, str]) -> None:
    """TuneD re-applies its active profile at every start, over what sysctl files and units
    set: the plan goes into a child profile that includes the active one and overrides just
    these knobs (tuned.conf(5): `include=`), made the active profile the way tuned-adm
    records it (/etc/tuned/active_profile, profile_mode manual). TuneD merges a child's
    section into the parent's of the same name (facts/tuned.py), so each knob is written in
    every unit of the active profile that sets it, and no unit is left with another value
    whatever order they apply in; a knob no unit sets goes into a unit of hpadvise's own
    (`[vm.hpadvise]`, `type=vm`), which merges into nothing of the parent's (a parent's [vm]
    may be disabled, for other machines, or of another type). Rollback restores both files."""
    sections: dict[str, tuple[str, list[str]]] = {}
    for knob, value in sorted(knobs.items(), key=lambda kv: kv[0].key):
        for unit, plugin, key in boot.tuned_units.get(knob) or (
                _tuned_home(knob, boot, ap.report.host.default_hugepage_kb),):
            sections.setdefault(unit, (plugin, []))[1].append(f"{key}={value}")
    parent = ",".join(boot.tuned_profile.split()) if boot.tuned_profile != TUNED_PROFILE \
        else _tuned_parent(root, boot)  # loader.py splits include= at "," and ";"
    text = [f"# Written by hpadvise apply (profile {ap.report.profile.name}); `hpadvise "
            "rollback` restores the previous TuneD profile.", "[main]",
            f"summary=hpadvise: huge pages and THP over {parent}", f"include={parent}"]
    # a section merging into a unit named otherwise than its plugin repeats `type=`: TuneD
    # takes the child's type, its name where it gives none (merger.py)
    for sec, (plugin, lines) in sections.items():
        text += ["", f"[{sec}]", *([f"type={plugin}"] if plugin != sec else []), *lines]
    d = f"{root}{tuned_home(boot)}"
    ap.steps.append(Step(File(f"{d}/tuned.conf"), File.encode("\n".join(text) + "\n"),
                         f"TuneD would re-apply {parent}'s values at its start", "persist"))
    ap.steps.append(Step(File(f"{root}/etc/tuned/active_profile"),
                         File.encode(TUNED_PROFILE + "\n"), "make it TuneD's profile",
                         "persist"))
    ap.steps.append(Step(File(f"{root}/etc/tuned/profile_mode"), File.encode("manual\n"),
                         "chosen by hand, as tuned-adm profile records it", "persist"))
    ap.notices.append(f"TuneD applies profile {TUNED_PROFILE} (over {parent}) at its next "
                      f"start; `tuned-adm profile {TUNED_PROFILE}` applies it now")


def _tuned_home(k: KnobId, boot, default_kb: int | None) -> tuple[str, str, str]:
    """(unit, plugin, option) for a knob no unit of the active profile sets: a THP file in
    TuneD's [vm] where this TuneD takes its option (thp_knobs.py), a sysctl or the default
    size's pool in [sysctl], any other file in [sysfs]."""
    if k.is_sysctl:
        return "sysctl.hpadvise", "sysctl", k.file
    if not k.is_pool and not k.per_size and THP[k.file].tuned and \
            THP[k.file].tuned_by(boot.tuned_version, boot.cmdline or ""):
        return "vm.hpadvise", "vm", THP[k.file].tuned[0]
    if not k.is_pool:
        return "sysfs.hpadvise", "sysfs", knob_path(k)
    if k.page_kb == default_kb:
        return "sysctl.hpadvise", "sysctl", "vm.nr_hugepages"
    return "sysfs.hpadvise", "sysfs", sysfs_pool(k.page_kb)


def _tuned_parent(root: str, boot) -> str:
    """The profile hpadvise's own child profile includes (a second apply keeps it)."""
    try:
        with open(f"{root}{tuned_home(boot)}/tuned.conf") as f:
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
