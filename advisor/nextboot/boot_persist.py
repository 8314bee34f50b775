"""Where apply persists each planned boot-time knob so that it comes last in the boot order
boot.py reads (a sysctl drop-in named to sort after the competitors, a TuneD child profile),
which competitors it cannot outrank, and the boot order replayed with hpadvise's own setters
in place."""

from __future__ import annotations

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
    path = s.source.removeprefix("TuneD ").split(" ")[-1].split(":")[0]
    name = path.rsplit("/", 1)[-1]
    return name in (SYSCTL_NAME, SYSCTL_LATE, UNIT_NAME) or (
        s.source.startswith("TuneD") and path.endswith(f"/{TUNED_PROFILE}/tuned.conf"))


@dataclass
class Persistence:
    """Where apply writes each knob of the plan so that the next boot gives the plan."""
    sysctl_name: str = SYSCTL_NAME
    tuned_file: str = f"/etc/tuned/{TUNED_PROFILE}/tuned.conf"  # the child profile
    sysctl: dict[str, str] = field(default_factory=dict)  # knob -> value, in the drop-in
    tuned: dict[str, str] = field(default_factory=dict)  # knob -> value, in the child profile
    other: dict[str, str] = field(default_factory=dict)  # knob -> value, unit / command line
    blocked: list[tuple[str, Setter, str]] = field(default_factory=list)  # knob, who, why

    def setters(self) -> list[Setter]:
        """hpadvise's own setters, placed where they apply at boot."""
        out = [Setter(k, v, f"/etc/sysctl.d/{self.sysctl_name}", 1)
               for k, v in self.sysctl.items()]
        out += [Setter(k, v, f"TuneD {self.tuned_file}", 5) for k, v in self.tuned.items()]
        out += [Setter(k, v, "hpadvise's unit or kernel command line", 2, ordered=False)
                for k, v in self.other.items()]
        return out


def persistence(b: Boot, plan: dict[str, str], default_kb: int | None) -> Persistence:
    """Decide where each planned knob goes: the default size's pool and the declared sysctls
    in a sysctl drop-in named to sort after every sysctl file that sets them, THP knobs in a
    unit or on the kernel command line; under TuneD, what TuneD would overwrite goes into a
    child profile of the active one. A competitor that applies later and cannot be outranked (procps reads
    /etc/sysctl.conf last; a unit or rc.local whose order is not fixed) blocks that knob."""
    p = Persistence(tuned_file=f"{tuned_home(b)}/tuned.conf")
    default = KnobId.pool(default_kb or 2048).key
    # a profile TuneD applies none of (tuned.py: refused) sets nothing at boot, and a child
    # including it would be refused as well: the plan persists as where TuneD is absent
    tuned = b.tuned_profile is not None and not b.tuned_refused
    for knob, value in plan.items():
        k = KnobId.parse(knob)
        thp = not k.is_pool and not k.is_sysctl
        rivals = [s for s in b.setters if s.knob == knob and s.value != value
                  and not own(s)]
        if knob == default or k.is_sysctl:  # the drop-in: vm.nr_hugepages, declared sysctls
            files = [s for s in rivals if s.stage == 1]
            late = [s for s in files if s.source.startswith("/etc/sysctl.conf")
                    and b.sysctl_engine == "procps"]
            for s in late:
                p.blocked.append((knob, s, "sysctl --system reads /etc/sysctl.conf after every "
                                  "sysctl.d file"))
            names = [s.source.split(":")[0].rsplit("/", 1)[-1] for s in files if s not in late]
            if any(n >= SYSCTL_NAME for n in names):
                p.sysctl_name = SYSCTL_LATE
                if any(n >= SYSCTL_LATE for n in names):
                    for s in files:
                        if s.source.split(":")[0].rsplit("/", 1)[-1] >= SYSCTL_LATE:
                            p.blocked.append((knob, s, f"it sorts after {SYSCTL_LATE}"))
            p.sysctl[knob] = value
        elif not tuned or not thp:
            # a unit where systemd runs, else a kernel parameter where GRUB is configured
            # (a THP file that has one, thp_knobs.py; other pool sizes have none here:
            # hugepagesz= pools are whole-boot reservations apply does not write)
            if b.systemd or (b.grub and thp and not k.per_size
                             and THP[k.file].takes_cmdline(b.kernel)):
                p.other[knob] = value
        later = [s for s in rivals if s.stage >= 2]
        for s in later:
            if s.source.endswith("(re-applied by TuneD)"):
                continue  # a sysctl file's own value again: the drop-in above outranks it
            if s.stage == 4:
                if s.source.startswith("TuneD [sysctl]") and knob in p.sysctl and \
                        any("reapply_sysctl" in n for n in b.notes):
                    continue  # TuneD applies the sysctl files again after its own
                p.tuned[knob] = value
            else:
                p.blocked.append((knob, s, "it runs later at boot, in an order hpadvise "
                                  "cannot outrank"))
        if thp and tuned:
            p.tuned[knob] = value  # TuneD applies THP at every start: say it in its profile
    return p


def after_apply(b: Boot, p: Persistence) -> Boot:
    """The boot as it would be once apply wrote `p`: hpadvise's setters take their place in
    the order (the child profile replaces the active TuneD profile's values)."""
    mine = p.setters()
    reapplied = {s.knob for s in b.setters if s.source.endswith("(re-applied by TuneD)")}
    keep = [s for s in b.setters if not own(s)
            and not s.source.endswith("(re-applied by TuneD)")
            and not (s.stage == 4 and s.knob in p.tuned and s.source.startswith("TuneD"))]
    order = [s.source.split(":")[0] for s in keep if s.stage == 1] + \
        [f"/etc/sysctl.d/{p.sysctl_name}"]
    names = {o: o.rsplit("/", 1)[-1] for o in order}

    def key(s: Setter) -> tuple:
        path = s.source.split(":")[0]
        if s.stage == 1:
            last = path == "/etc/sysctl.conf" and b.sysctl_engine == "procps"
            return (1, 1 if last else 0, names.get(path, ""))
        return (s.stage, 0, "")
    merged = sorted(keep + mine, key=key)
    for knob in reapplied:
        files = [s for s in merged if s.stage == 1 and s.knob == knob]
        if files:
            merged.append(Setter(knob, files[-1].value,
                                 files[-1].source + " (re-applied by TuneD)", 4, ordered=False))
    return replace(b, setters=merged, notes=list(b.notes))
