"""What the next boot will set: every place that writes a huge page or THP knob at boot, read
in the order they apply, so that `check` can show each knob now, at next boot and in the plan.

The order at boot, and the sources (each a `Setter`):
 0. the kernel command line (`hugepages=`, `transparent_hugepage=`, ...): the one configured
    for the next boot is read from GRUB's generated config (what the boot loader will pass),
    /etc/default/grub (what `update-grub` will generate next), BLS entries
    (/boot/loader/entries) or /etc/kernel/cmdline; Documentation/admin-guide/kernel-parameters.txt.
 1. sysctl files, as `systemd-sysctl` (sysctl.d(5)) or, without systemd, procps's
    `sysctl --system` (sysctl(8)) read them: *.conf in /etc/sysctl.d, /run/sysctl.d,
    /usr/local/lib/sysctl.d, /usr/lib/sysctl.d (and /lib/sysctl.d for procps); a name in an
    earlier directory shadows the same name in a later one (a symlink to /dev/null masks it),
    all names are sorted together and applied in that order, so the last name wins; procps
    then reads /etc/sysctl.conf last of all.
 2. systemd units and init scripts that write the knobs (a "disable THP" unit, hpadvise's own),
    when enabled;
 3. /etc/rc.local, when executable (it runs last among the init scripts);
 4. TuneD's active profile, merged and applied as TuneD does (tuned.py): `[vm]`, `[sysctl]`,
    `[sysfs]`, `[bootloader] cmdline`. With `reapply_sysctl = 1` in tuned-main.conf (its
    default) it then applies the sysctl files again, which win over the profile's [sysctl].
Units, rc.local and TuneD all run after the sysctl files; among themselves their order is not
fixed unless a unit says so, and the prediction says where it is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..kit.knob_id import KnobId, pool_of_path
from ..kit.paths import HUGEPAGES_DIR, NODES_DIR, THP_DIR as THP
from . import tuned
from .boot_cmdline import cmdline_knobs, next_boot
from .boot_sources import kernel_config
from .sysroot import SysRoot
from .sysctls import PLANNED, declared
from .thp_knobs import (SIZES, THP as DECLARED_THP, SizesAtBoot, kernel_version,
                        sizes_at_boot)

SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d",
               "/lib/sysctl.d")
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
             "/usr/lib/systemd/system", "/lib/systemd/system")
STAGES = ("kernel command line", "sysctl files", "units and init scripts", "rc.local", "TuneD")


@dataclass(frozen=True)
class Setter:
    """One place that sets a knob at boot."""
    knob: KnobId
    value: str
    source: str  # for people: file:line, or a description
    stage: int  # index into STAGES
    ordered: bool = True  # False: its order among its stage's peers and later stages is unknown
    path: str | None = None  # the file that sets it; None: the command line, the kernel
    plugin: str | None = None  # TuneD's plugin that sets it (vm, sysctl, sysfs)
    reapplied: bool = False  # a sysctl file's value TuneD applies again after its profile

    def again_by_tuned(self) -> Setter:
        """This sysctl file's setting as TuneD applies it again (reapply_sysctl)."""
        return Setter(self.knob, self.value, self.source + " (re-applied by TuneD)", 4,
                      ordered=False, path=self.path, reapplied=True)

    @property
    def origin(self) -> str:
        """Who sets it, without the line: a file, TuneD's plugin and profile, a description."""
        if self.plugin:
            return f"TuneD [{self.plugin}] {self.path}"
        return self.path or self.source


@dataclass
class Boot:
    """Every setter found, in the order they apply (stage, then file order)."""
    setters: list[Setter] = field(default_factory=list)
    sysctl_engine: str = "procps"  # or "systemd-sysctl"
    cmdline_source: str | None = None  # where the next boot's kernel command line comes from
    cmdline: str | None = None
    tuned_profile: str | None = None  # the active TuneD profile(s), if TuneD is installed
    tuned_files: tuple[str, ...] = ()  # the include chain, parent first
    tuned_version: tuple[int, int] | None = None  # the installed TuneD's (major, minor)
    # knob -> the units of TuneD's merged profile that set it, (unit, plugin, option), in the
    # order TuneD applies them: a child profile overrides the knob in each (act/persist.py)
    tuned_units: dict[KnobId, tuple[tuple[str, str, str], ...]] = field(default_factory=dict)
    tuned_dir: str | None = None  # where TuneD looks for a profile first (hpadvise's goes there)
    tuned_refused: str | None = None  # why TuneD applies none of the active profile, if so
    notes: list[str] = field(default_factory=list)
    systemd: bool = False  # units run at boot (apply can write one)
    grub: bool = False  # /etc/default/grub exists (apply can add kernel parameters)
    # the next boot's kernel: its release from the boot entry's image (None: not found, taken
    # to be this one), and its (major, minor), which decides the boot parameters it takes
    release: str | None = None
    kernel: tuple[int, int] | None = None

    def at_boot(self, knob: KnobId) -> Setter | None:
        """The setter whose value the knob has once boot is over (the last to apply; the
        kernel's default, stage -1, when nothing sets it)."""
        found = [s for s in self.setters if s.knob == knob]
        return found[-1] if found else None


# ---- sysctl files ------------------------------------------------------------------------

def sysctl_files(sr: SysRoot, engine: str) -> list[str]:
    """The sysctl files in the order they are applied."""
    chosen: dict[str, str] = {}
    dirs = SYSCTL_DIRS if engine == "procps" else SYSCTL_DIRS[:4] + ("/lib/sysctl.d",)
    for d in dirs:
        for name in sr.listdir(d):
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = f"{d}/{name}"
    out = []
    for name in sorted(chosen):
        p = chosen[name]
        if _masked(sr, p):
            continue
        out.append(p)
    if engine == "procps" and sr.exists("/etc/sysctl.conf"):
        out.append("/etc/sysctl.conf")
    return out


def _masked(sr: SysRoot, path: str) -> bool:
    import os
    try:
        return os.path.realpath(sr.path(path)) == "/dev/null" or \
            os.readlink(sr.path(path)) == "/dev/null"
    except OSError:
        return False


def sysctl_knob(key: str, default_kb: int | None) -> KnobId | None:
    """The knob a sysctl name sets: the default size's pool, or a declared setting."""
    key = key.strip().lstrip("-").replace("/", ".")
    if key in ("vm.nr_hugepages", "vm.nr_hugepages_mempolicy"):
        return KnobId.pool(default_kb or 2048)
    s = declared(key)
    return KnobId.sysctl(s.name) if s else None


def _sysctl_setters(sr: SysRoot, files: list[str], default_kb: int | None,
                    stage: int = 1) -> list[Setter]:
    out = []
    for f in files:
        for n, line in enumerate((sr.read(f, quiet_missing=True) or "").splitlines(), 1):
            line = line.strip()
            if not line or line[0] in "#;" or "=" not in line:
                continue
            key, _, value = line.partition("=")
            knob = sysctl_knob(key, default_kb)
            if knob:
                out.append(Setter(knob, value.strip(), f"{f}:{n}", stage, path=f))
    return out


# ---- units, init scripts, rc.local ----------------------------------------------------------

_WRITE = re.compile(r"""echo\s+(?:-n\s+)?['"]?([\w+\-]+)['"]?\s*>+\s*['"]?"""
                    r"(/(?:proc/)?sys/[\w/.\-]+)")
_SYSCTL_W = re.compile(r"sysctl\s+(?:-q\s+)?-w\s+['\"]?((?:vm|kernel)[./]\w+)\s*=\s*(\d+)")


def path_knob(path: str, default_kb: int | None = None) -> KnobId | None:
    """The knob a sysfs or /proc/sys path sets."""
    if path.startswith("/proc/sys/"):
        return sysctl_knob(path.removeprefix("/proc/sys/"), default_kb)
    if path.startswith(THP + "/"):
        return KnobId.of_thp_path(path.removeprefix(THP + "/"))
    pool = pool_of_path(path, HUGEPAGES_DIR, NODES_DIR)
    return KnobId.pool(pool[1]) if pool and pool[0] is None else None


def _script_setters(text: str, where: str, stage: int, default_kb: int | None,
                    ordered: bool) -> list[Setter]:
    out = []
    nodes: dict[int, dict[int, str]] = {}  # size -> node -> value (NUMA: each node's pool)
    first: dict[int, int] = {}  # size -> the line of its first node write
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("#"):
            continue
        for mt in _WRITE.finditer(s):
            knob = path_knob(mt.group(2), default_kb)
            if knob:
                out.append(Setter(knob, mt.group(1), f"{where}:{n}", stage, ordered, where))
            elif (pool := pool_of_path(mt.group(2), HUGEPAGES_DIR, NODES_DIR)) \
                    and pool[0] is not None and mt.group(1).isdigit():
                nodes.setdefault(pool[1], {})[pool[0]] = mt.group(1)
                first.setdefault(pool[1], n)
        for mt in _SYSCTL_W.finditer(s):
            if knob := sysctl_knob(mt.group(1), default_kb):
                out.append(Setter(knob, mt.group(2), f"{where}:{n}", stage, ordered, where))
    # a pool written node by node is, at the end of the boot, the sum of its nodes
    for kb, per in nodes.items():
        out.append(Setter(KnobId.pool(kb), str(sum(int(v) for v in per.values())),
                          f"{where}:{first[kb]}", stage, ordered, where))
    return out


def _enabled_units(sr: SysRoot) -> set[str]:
    """Unit names linked into a .wants directory under /etc/systemd/system."""
    out: set[str] = set()
    for d in sr.listdir("/etc/systemd/system"):
        if d.endswith(".wants") or d.endswith(".requires"):
            out.update(sr.listdir(f"/etc/systemd/system/{d}"))
    return out


def _unit_setters(sr: SysRoot, default_kb: int | None, systemd: bool) -> list[Setter]:
    out: list[Setter] = []
    if systemd:
        enabled = _enabled_units(sr)
        seen: set[str] = set()
        for d in UNIT_DIRS:
            for name in sr.listdir(d):
                if not name.endswith(".service") or name in seen:
                    continue
                seen.add(name)
                if name not in enabled:
                    continue
                text = sr.read(f"{d}/{name}", quiet_missing=True) or ""
                execs = "\n".join(ln if re.match(r"\s*Exec(Start|StartPre|StartPost)=", ln)
                                  else "" for ln in text.splitlines())
                out += _script_setters(execs, f"{d}/{name}", 2, default_kb, ordered=False)
    else:
        runlevel = {n[3:] for d in ("/etc/rcS.d", "/etc/rc2.d", "/etc/rc3.d")
                    for n in sr.listdir(d) if n[:1] == "S"}
        for name in sr.listdir("/etc/init.d"):
            if name in runlevel:
                text = sr.read(f"/etc/init.d/{name}", quiet_missing=True) or ""
                out += _script_setters(text, f"/etc/init.d/{name}", 2, default_kb,
                                       ordered=False)
    import os
    rc = sr.path("/etc/rc.local")
    if os.path.isfile(rc) and os.access(rc, os.X_OK):
        out += _script_setters(sr.read("/etc/rc.local") or "", "/etc/rc.local", 3, default_kb,
                               ordered=False)
    return out


# ---- TuneD ------------------------------------------------------------------------------

def _tuned(sr: SysRoot, b: Boot, default_kb: int | None,
           sizes: SizesAtBoot) -> list[Setter]:
    """What TuneD's merged profile sets, in the order it applies it (tuned.py); a [vm] option
    counts where this TuneD takes it, `transparent_hugepages` where the next boot's command
    line leaves THP to it (TuneD's plugin_vm.py)."""
    if not (sr.exists("/usr/sbin/tuned") or sr.exists("/usr/lib/tuned")):
        return []
    active = (sr.read("/etc/tuned/active_profile", quiet_missing=True) or "").split()
    if not active:
        return []
    b.tuned_version = tuned.version(sr)
    p = tuned.profile(sr, active, b.tuned_version)
    b.tuned_profile, b.tuned_files, b.tuned_dir = " ".join(active), p.files, p.dirs[-1]
    b.tuned_refused = p.refused
    b.notes += p.notes
    merged: dict[KnobId, Setter] = {}
    units: dict[KnobId, list[tuple[str, str, str]]] = {}
    for o in p.options:
        t = next((t for t in DECLARED_THP.values() if o.key in t.tuned), None)
        k = (KnobId.thp(t.file) if o.plugin == "vm" and t and t.tuned_by(
            b.tuned_version, b.cmdline or "") else sysctl_knob(o.key, default_kb)
            if o.plugin == "sysctl" else path_knob(o.key, default_kb) if o.plugin == "sysfs"
            else None)
        words = (DECLARED_THP[k.file].words if not k.per_size else SIZES[k.file].words) \
            if k and not k.is_pool and not k.is_sysctl else None
        if words and o.value not in words:  # plugin_vm.py refuses it, the kernel too
            b.notes.append(f"TuneD's {o.key}={o.value} ({o.where}) is not one of "
                           f"{', '.join(words)}: it sets nothing")
            continue
        if k:  # the last applied wins
            merged[k] = Setter(k, o.value, f"TuneD [{o.plugin}] {o.where}", 4, ordered=False,
                               path=o.file, plugin=o.plugin)
            units.setdefault(k, []).append((o.unit, o.plugin, o.key))
        if o.plugin == "bootloader" and o.key == "cmdline":
            for k2, v2 in cmdline_knobs(o.value, default_kb, sizes):
                b.notes.append(f"TuneD {o.where} puts "
                               f"{f'a pool of {k2.page_kb}' if k2.is_pool else k2.key}"
                               f"={v2} on the kernel command line it manages")
    b.tuned_units = {k: tuple(v) for k, v in units.items()}
    if p.reapply_sysctl:  # TuneD applies the system's sysctl files again after its own
        b.notes.append("TuneD re-applies the system's sysctl files after its profile "
                       "(reapply_sysctl): they win over its [sysctl]")
    return list(merged.values())


# ---- the kernel's own defaults -------------------------------------------------------------

def _kernel_defaults(sr: SysRoot, sizes: SizesAtBoot, release: str | None) -> list[Setter]:
    """What the knobs are when nothing sets them: pools empty; declared sysctls and THP files,
    the per-size ones too, as declared (sysctls.py, thp_knobs.py); THP `enabled` as the
    kernel was built (CONFIG_TRANSPARENT_HUGEPAGE_ALWAYS / _MADVISE / _NEVER, mm/Kconfig),
    `shmem_enabled` too where it was built otherwise (CONFIG_TRANSPARENT_HUGEPAGE_SHMEM_HUGE_*,
    mm/Kconfig); of the kernel the next boot starts."""
    config = kernel_config(sr, release) or ""
    out = [Setter(KnobId.sysctl(s.name), str(s.default), "kernel default (" +
                  s.default_source + ")", -1) for s in PLANNED]
    for t in DECLARED_THP.values():
        built = [m for m in t.words if t.config and f"{t.config}{m.upper()}=y" in config]
        value = built[-1] if built else t.default
        if value is not None:
            out.append(Setter(KnobId.thp(t.file), value, "kernel default (" + (
                f"{t.config}{value.upper()}" if built and t.default is None
                else t.default_source) + ")", -1))
    return out + [Setter(k, v, f"kernel default ({src})", -1) for k, v, src in
                  sizes.defaults()]


# ---- all together -----------------------------------------------------------------------

def read(sr: SysRoot, default_kb: int | None, sizes: SizesAtBoot | None = None) -> Boot:
    """`sizes`: the per-size THP files as check read them (else read here)."""
    b = Boot()
    systemd, sizes = sr.exists("/run/systemd/system"), sizes or sizes_at_boot(sr)
    b.systemd, b.grub = systemd, sr.exists("/etc/default/grub")
    b.sysctl_engine = "systemd-sysctl" if systemd else "procps"
    nb = next_boot(sr, sizes)
    b.cmdline, b.cmdline_source, b.release = nb.cmdline, nb.source, nb.release
    b.notes += nb.notes
    running = (sr.read("/proc/sys/kernel/osrelease", quiet_missing=True) or "").strip()
    if nb.release and nb.release != running and kernel_version(nb.release):
        sizes = sizes._replace(kernel=kernel_version(nb.release))  # the parameters it takes
        b.notes.append(f"the next boot starts kernel {nb.release} ({nb.source}), this boot "
                       f"runs {running or 'another'}: its THP files are taken to be this one's")
    b.kernel = sizes.kernel
    if b.cmdline is None:
        b.notes.append("no boot loader configuration found (no GRUB, BLS entries or "
                       "/etc/kernel/cmdline): the next boot's kernel command line is taken to "
                       "be this boot's")
        b.cmdline = (sr.read("/proc/cmdline") or "").strip()
        b.cmdline_source = "/proc/cmdline (this boot's)"
    b.setters += _kernel_defaults(sr, sizes, b.release)
    b.setters += [Setter(k, v, f"kernel command line ({b.cmdline_source})", 0)
                  for k, v in cmdline_knobs(b.cmdline, default_kb, sizes)]
    sysctl = _sysctl_setters(sr, sysctl_files(sr, b.sysctl_engine), default_kb)
    units = _unit_setters(sr, default_kb, systemd)
    by_tuned = _tuned(sr, b, default_kb, sizes)
    b.setters += sysctl + units + by_tuned
    if by_tuned and any("reapply_sysctl" in n for n in b.notes):
        # after its profile TuneD applies the system's sysctl files again: their last value
        # of each knob TuneD's [sysctl] also sets comes last
        for knob in {t.knob for t in by_tuned if t.plugin == "sysctl"}:
            mine = [s for s in sysctl if s.knob == knob]
            if mine:
                b.setters.append(mine[-1].again_by_tuned())
    later = [s for s in b.setters if s.stage >= 2]
    for knob in {s.knob for s in later}:
        who = {s.origin for s in later if s.knob == knob}
        if len(who) > 1:
            b.notes.append(f"{knob.key} is written at boot by {', '.join(sorted(who))}, in an "
                           "order "
                           "that is not fixed: the value after boot may be any of theirs")
    return b
