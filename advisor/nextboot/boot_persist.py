"""Where apply persists each planned boot-time knob so that it comes last in the boot order
boot.py reads (a sysctl drop-in named to sort after the competitors, a TuneD child profile),
which competitors it cannot outrank, and the boot order replayed with hpadvise's own setters
in place."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from ..facts.boot import Boot, Setter
from ..facts.thp_knobs import THP
from ..kit.knob_id import KnobId


SYSCTL_NAME = "60-hpadvise.conf"
SYSCTL_LATE = "99-zz-hpadvise.conf"  # sorts after 99-sysctl.conf and other 99- names
TUNED_PROFILE = "hpadvise"
UNIT_NAME = "hpadvise-hugepages.service"


def tuned_home(b: Boot) -> str:
    """hpadvise's TuneD child profile's directory: in the load directory TuneD looks in first
    (/etc/tuned, or /etc/tuned/profiles from TuneD 2.24; facts/tuned.py)."""
    return f"{b.tuned_dir or '/etc/tuned'}/{TUNED_PROFILE}"


def own(s: Setter) -> bool:
    """Set by hpadvise's own persistence (an earlier apply)."""
    path = s.path or ""
    return os.path.basename(path) in (SYSCTL_NAME, SYSCTL_LATE, UNIT_NAME) or \
        path.endswith(f"/{TUNED_PROFILE}/tuned.conf")


@dataclass
class Persistence:
    """Where apply writes each knob of the plan so that the next boot gives the plan."""
    sysctl_name: str = SYSCTL_NAME
    tuned_file: str = f"/etc/tuned/{TUNED_PROFILE}/tuned.conf"  # the child profile
    sysctl: dict[KnobId, str] = field(default_factory=dict)  # knob -> value, in the drop-in
    tuned: dict[KnobId, str] = field(default_factory=dict)  # knob -> value, child profile
    other: dict[KnobId, str] = field(default_factory=dict)  # knob -> value, unit, cmdline
    blocked: list[tuple[KnobId, Setter, str]] = field(default_factory=list)  # knob, who, why

    def setters(self) -> list[Setter]:
        """hpadvise's own setters, placed where they apply at boot."""
        drop_in = f"/etc/sysctl.d/{self.sysctl_name}"
        out = [Setter(k, v, drop_in, 1, path=drop_in) for k, v in self.sysctl.items()]
        out += [Setter(k, v, f"TuneD {self.tuned_file}", 5, path=self.tuned_file)
                for k, v in self.tuned.items()]
        out += [Setter(k, v, "hpadvise's unit or kernel command line", 2, ordered=False)
                for k, v in self.other.items()]
        return out


def persistence(b: Boot, plan: dict[KnobId, str], default_kb: int | None) -> Persistence:
    """Decide where each planned knob goes: the default size's pool and the declared sysctls
    in a sysctl drop-in named to sort after every sysctl file that sets them, THP knobs in a
    unit or on the kernel command line; under TuneD, what TuneD would overwrite goes into a
    child profile of the active one. A competitor that applies later and cannot be outranked (procps reads
    /etc/sysctl.conf last; a unit or rc.local whose order is not fixed) blocks that knob."""
    p = Persistence(tuned_file=f"{tuned_home(b)}/tuned.conf")
    default = KnobId.pool(default_kb or 2048)
    # a profile TuneD applies none of (tuned.py: refused) sets nothing at boot, and a child
    # including it would be refused as well: the plan persists as where TuneD is absent
    tuned = b.tuned_profile is not None and not b.tuned_refused
    for k, value in plan.items():
        thp = not k.is_pool and not k.is_sysctl
        rivals = [s for s in b.setters if s.knob == k and s.value != value
                  and not own(s)]
        if k == default or k.is_sysctl:  # the drop-in: vm.nr_hugepages, declared sysctls
            files = [s for s in rivals if s.stage == 1]
            late = [s for s in files if s.path == "/etc/sysctl.conf"
                    and b.sysctl_engine == "procps"]
            for s in late:
                p.blocked.append((k, s, "sysctl --system reads /etc/sysctl.conf after every "
                                  "sysctl.d file"))
            names = [os.path.basename(s.path or "") for s in files if s not in late]
            if any(n >= SYSCTL_NAME for n in names):
                p.sysctl_name = SYSCTL_LATE
                if any(n >= SYSCTL_LATE for n in names):
                    for s in files:
                        if os.path.basename(s.path or "") >= SYSCTL_LATE:
                            p.blocked.append((k, s, f"it sorts after {SYSCTL_LATE}"))
            p.sysctl[k] = value
        elif not tuned or not thp:
            # a unit where systemd runs, else a kernel parameter where GRUB is configured
            # (a THP file that has one, thp_knobs.py; other pool sizes have none here:
            # hugepagesz= pools are whole-boot reservations apply does not write)
            if b.systemd or (b.grub and thp and not k.per_size
                             and THP[k.file].takes_cmdline(b.kernel)):
                p.other[k] = value
        later = [s for s in rivals if s.stage >= 2]
        for s in later:
            if s.reapplied:
                continue  # a sysctl file's own value again: the drop-in above outranks it
            if s.stage == 4:
                if s.plugin == "sysctl" and k in p.sysctl and \
                        any("reapply_sysctl" in n for n in b.notes):
                    continue  # TuneD applies the sysctl files again after its own
                p.tuned[k] = value
            else:
                p.blocked.append((k, s, "it runs later at boot, in an order hpadvise "
                                  "cannot outrank"))
        if thp and tuned:
            p.tuned[k] = value  # TuneD applies THP at every start: say it in its profile
    return p


def after_apply(b: Boot, p: Persistence) -> Boot:
    """The boot as it would be once apply wrote `p`: hpadvise's setters take their place in
    the order (the child profile replaces the active TuneD profile's values)."""
    mine = p.setters()
    reapplied = {s.knob for s in b.setters if s.reapplied}
    keep = [s for s in b.setters if not own(s) and not s.reapplied
            and not (s.stage == 4 and s.knob in p.tuned and s.plugin is not None)]
    order = [s.path for s in keep if s.stage == 1] + [f"/etc/sysctl.d/{p.sysctl_name}"]
    names = {o: os.path.basename(o) for o in order}

    def key(s: Setter) -> tuple:
        path = s.path
        if s.stage == 1:
            last = path == "/etc/sysctl.conf" and b.sysctl_engine == "procps"
            return (1, 1 if last else 0, names.get(path, ""))
        return (s.stage, 0, "")
    merged = sorted(keep + mine, key=key)
    for knob in reapplied:
        files = [s for s in merged if s.stage == 1 and s.knob == knob]
        if files:
            merged.append(files[-1].again_by_tuned())
    return replace(b, setters=merged, notes=list(b.notes))
