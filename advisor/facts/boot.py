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
 4. TuneD's active profile with its include chain (tuned.conf(5): `include=` profiles are
    merged first, the including profile overrides them): `[vm] transparent_hugepages`,
    `[sysctl]`, `[sysfs]`, `[bootloader] cmdline`. TuneD applies it at every start; with
    `reapply_sysctl = 1` in tuned-main.conf (its default) it then applies the system's sysctl
    files again, which therefore win over the profile's [sysctl].
Units, rc.local and TuneD all run after the sysctl files; among themselves their order is not
fixed unless a unit says so, and the prediction says where it is not.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from ..kit.knob_id import KnobId, pool_of_path
from ..kit.paths import HUGEPAGES_DIR, NODES_DIR, THP_DIR as THP
from ..kit.sizing import cmdline_kb
from .boot_sources import grub_default, ini, kernel_config, tuned_chain
from .sysroot import SysRoot
from .sysctls import PLANNED, declared
from .thp_knobs import THP as DECLARED_THP, SizesAtBoot, sizes_at_boot

SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d",
               "/lib/sysctl.d")
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
             "/usr/lib/systemd/system", "/lib/systemd/system")
STAGES = ("kernel command line", "sysctl files", "units and init scripts", "rc.local", "TuneD")


@dataclass(frozen=True)
class Setter:
    """One place that sets a knob at boot."""
    knob: str  # a KnobId's key (kit/knob_id.py)
    value: str
    source: str  # file:line, or a description
    stage: int  # index into STAGES
    ordered: bool = True  # False: its order among its stage's peers and later stages is unknown


@dataclass
class Boot:
    """Every setter found, in the order they apply (stage, then file order)."""
    setters: list[Setter] = field(default_factory=list)
    sysctl_engine: str = "procps"  # or "systemd-sysctl"
    cmdline_source: str | None = None  # where the next boot's kernel command line comes from
    cmdline: str | None = None
    tuned_profile: str | None = None  # the active TuneD profile(s), if TuneD is installed
    tuned_files: tuple[str, ...] = ()  # the include chain, parent first
    notes: list[str] = field(default_factory=list)
    systemd: bool = False  # units run at boot (apply can write one)
    grub: bool = False  # /etc/default/grub exists (apply can add kernel parameters)
    kernel: tuple[int, int] | None = None  # the next boot's, taken to be this one's

    def at_boot(self, knob: str) -> Setter | None:
        """The setter whose value the knob has once boot is over (the last to apply; the
        kernel's default, stage -1, when nothing sets it)."""
        found = [s for s in self.setters if s.knob == knob]
        return found[-1] if found else None

    def competitors(self, knob: str, except_source: str = "") -> list[Setter]:
        return [s for s in self.setters if s.knob == knob and not s.source.startswith(
            except_source or "\0")]


# ---- the kernel command line ------------------------------------------------------------

def cmdline_knobs(cmdline: str, default_kb: int | None,
                  sizes: SizesAtBoot | None = None) -> list[tuple[str, str]]:
    """(knob, value) from kernel parameters: `hugepages=N` reserves N pages of the size named
    by the `hugepagesz=` before it, or of the default size (`default_hugepagesz=` or the
    architecture's); `hugepages=0:N,1:M` is per node (summed); transparent_hugepage(_shmem)=
    set the THP modes, thp_anon= and thp_shmem= the per-size ones, where the kernel of `sizes`
    takes them (thp_knobs.py; kernel-parameters.txt)."""
    out: list[tuple[str, str]] = []
    params: list[tuple[str, str]] = []
    size_kb: int | None = None
    default = default_kb or 2048
    try:
        tokens = shlex.split(cmdline or "", posix=True)
    except ValueError:
        tokens = (cmdline or "").split()
    for tok in tokens:
        if tok == "--":  # what follows is init's, not the kernel's
            break
        key, _, value = tok.partition("=")
        if key == "default_hugepagesz":
            default = cmdline_kb(value) or default
        elif key == "hugepagesz":
            size_kb = cmdline_kb(value)
        elif key == "hugepages":
            pages = sum(int(p.split(":")[-1]) for p in value.split(",") if p.split(":")[-1]
                        .isdigit())
            out.append((KnobId.pool(size_kb or default).key, str(pages)))
            size_kb = None
        elif t := next((t for t in DECLARED_THP.values() if t.cmdline == key
                        and t.takes_cmdline(sizes.kernel if sizes else None)), None):
            out.append((KnobId.thp(t.file).key, value))  # thp_knobs.py: its parameter
        params.append((key, value))
    return out + [(k.key, v) for k, v in (sizes.from_cmdline(params) if sizes else ())]


def _next_cmdline(sr: SysRoot, b: Boot, sizes: SizesAtBoot) -> None:
    """The kernel command line of the next boot, and where it comes from."""
    for cfg in ("/boot/grub/grub.cfg", "/boot/grub2/grub.cfg"):
        text = sr.read(cfg, quiet_missing=True)
        if text:  # the first `linux` line: the default entry unless GRUB_DEFAULT says else
            mt = re.search(r"^\s*linux(?:efi)?\s+\S+\s+(.*)$", text, re.M)
            if mt:
                b.cmdline, b.cmdline_source = mt.group(1).strip(), f"{cfg} (first entry)"
                break
    entries = sorted(n for n in sr.listdir("/boot/loader/entries") if n.endswith(".conf"))
    if b.cmdline is None and entries:
        last = entries[-1]  # sd-boot and grubby default to the newest entry
        for line in (sr.read(f"/boot/loader/entries/{last}") or "").splitlines():
            if line.startswith("options "):
                b.cmdline = line[len("options "):].strip()
                b.cmdline_source = f"/boot/loader/entries/{last}"
    if b.cmdline is None:
        text = sr.read("/etc/kernel/cmdline", quiet_missing=True)
        if text:
            b.cmdline, b.cmdline_source = text.strip(), "/etc/kernel/cmdline"
    grub, files = grub_default(sr)
    if grub is not None:
        if b.cmdline is None:
            b.cmdline, b.cmdline_source = grub, " + ".join(files)
        else:
            want = dict(cmdline_knobs(grub, None, sizes))
            have = dict(cmdline_knobs(b.cmdline, None, sizes))
            if want != have:
                b.notes.append(f"{' + '.join(files)} asks for {_fmt(want) or 'nothing'} but "
                               f"{b.cmdline_source} boots with {_fmt(have) or 'nothing'}: "
                               "run update-grub for it to take effect")


def _fmt(knobs: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(knobs.items()))


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


def sysctl_knob(key: str, default_kb: int | None) -> str | None:
    """The knob a sysctl name sets: the default size's pool, or a declared setting."""
    key = key.strip().lstrip("-").replace("/", ".")
    if key in ("vm.nr_hugepages", "vm.nr_hugepages_mempolicy"):
        return KnobId.pool(default_kb or 2048).key
    s = declared(key)
    return KnobId.sysctl(s.name).key if s else None


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
                out.append(Setter(knob, value.strip(), f"{f}:{n}", stage))
    return out


# ---- units, init scripts, rc.local ----------------------------------------------------------

_WRITE = re.compile(r"""echo\s+(?:-n\s+)?['"]?([\w+\-]+)['"]?\s*>+\s*['"]?"""
                    r"(/(?:proc/)?sys/[\w/.\-]+)")
_SYSCTL_W = re.compile(r"sysctl\s+(?:-q\s+)?-w\s+['\"]?((?:vm|kernel)[./]\w+)\s*=\s*(\d+)")


def path_knob(path: str, default_kb: int | None = None) -> str | None:
    """The knob a sysfs or /proc/sys path sets."""
    if path.startswith("/proc/sys/"):
        return sysctl_knob(path[len("/proc/sys/"):], default_kb)
    if path.startswith(THP + "/"):
        k = KnobId.of_thp_path(path[len(THP) + 1:])
        return k.key if k else None
    pool = pool_of_path(path, HUGEPAGES_DIR, NODES_DIR)
    return KnobId.pool(pool[1]).key if pool and pool[0] is None else None


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
                out.append(Setter(knob, mt.group(1), f"{where}:{n}", stage, ordered))
            elif (pool := pool_of_path(mt.group(2), HUGEPAGES_DIR, NODES_DIR)) \
                    and pool[0] is not None and mt.group(1).isdigit():
                nodes.setdefault(pool[1], {})[pool[0]] = mt.group(1)
                first.setdefault(pool[1], n)
        for mt in _SYSCTL_W.finditer(s):
            if knob := sysctl_knob(mt.group(1), default_kb):
                out.append(Setter(knob, mt.group(2), f"{where}:{n}", stage, ordered))
    # a pool written node by node is, at the end of the boot, the sum of its nodes
    for kb, per in nodes.items():
        out.append(Setter(KnobId.pool(kb).key, str(sum(int(v) for v in per.values())),
                          f"{where}:{first[kb]}", stage, ordered))
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
    if not (sr.exists("/usr/sbin/tuned") or sr.exists("/usr/lib/tuned")):
        return []
    active = (sr.read("/etc/tuned/active_profile", quiet_missing=True) or "").split()
    if not active:
        return []
    b.tuned_profile = " ".join(active)
    chain = tuned_chain(sr, active)
    b.tuned_files = tuple(chain)
    main_conf = ini("[main]\n" + (sr.read("/etc/tuned/tuned-main.conf", quiet_missing=True)
                                   or ""))["main"]
    reapply = main_conf.get("reapply_sysctl", ("1", 0))[0].lower() not in ("0", "false", "no")
    merged: dict[str, Setter] = {}
    for f in chain:
        for sec, keys in ini(sr.read(f) or "").items():
            plugin = keys.get("type", (sec, 0))[0]
            for k, (v, n) in keys.items():
                knob = None
                t = next((t for t in DECLARED_THP.values() if k in t.tuned), None)
                if plugin == "vm" and t:
                    knob = KnobId.thp(t.file).key  # thp_knobs.py: its [vm] options
                elif plugin == "sysctl":
                    knob = sysctl_knob(k, default_kb)
                elif plugin == "sysfs":
                    knob = path_knob(k, default_kb)
                if knob:  # a later (including) profile overrides its parents
                    merged[knob] = Setter(knob, v, f"TuneD [{plugin}] {f}:{n}", 4,
                                          ordered=False)
                if plugin == "bootloader" and k == "cmdline":
                    for knob2, v2 in cmdline_knobs(v, default_kb, sizes):
                        k2 = KnobId.parse(knob2)
                        b.notes.append(f"TuneD {f}:{n} puts "
                                       f"{f'a pool of {k2.page_kb}' if k2.is_pool else k2.key}"
                                       f"={v2} on the kernel command line it manages")
    out = list(merged.values())
    if reapply:  # TuneD applies the system's sysctl files again after its own
        b.notes.append("TuneD re-applies the system's sysctl files after its profile "
                       "(reapply_sysctl): they win over its [sysctl]")
    return out


# ---- the kernel's own defaults -------------------------------------------------------------

def _kernel_defaults(sr: SysRoot, sizes: SizesAtBoot) -> list[Setter]:
    """What the knobs are when nothing sets them: pools empty; declared sysctls and THP files,
    the per-size ones too, as declared (sysctls.py, thp_knobs.py); THP `enabled` as the
    kernel was built (CONFIG_TRANSPARENT_HUGEPAGE_ALWAYS / _MADVISE / _NEVER, mm/Kconfig),
    `shmem_enabled` too where it was built otherwise (CONFIG_TRANSPARENT_HUGEPAGE_SHMEM_HUGE_*,
    mm/Kconfig)."""
    config = kernel_config(sr) or ""
    out = [Setter(KnobId.sysctl(s.name).key, str(s.default), "kernel default (" +
                  s.default_source.split(",")[0] + ")", -1) for s in PLANNED]
    for t in DECLARED_THP.values():
        built = [m for m in t.words if t.config and f"{t.config}{m.upper()}=y" in config]
        value = built[-1] if built else t.default
        if value is not None:
            out.append(Setter(KnobId.thp(t.file).key, value, "kernel default (" + (
                f"{t.config}{value.upper()}" if built and t.default is None
                else t.default_source) + ")", -1))
    return out + [Setter(k.key, v, f"kernel default ({src})", -1) for k, v, src in
                  sizes.defaults()]


# ---- all together -----------------------------------------------------------------------

def read(sr: SysRoot, default_kb: int | None, sizes: SizesAtBoot | None = None) -> Boot:
    """`sizes`: the per-size THP files as check read them (else read here)."""
    b = Boot()
    systemd, sizes = sr.exists("/run/systemd/system"), sizes or sizes_at_boot(sr)
    b.systemd, b.grub, b.kernel = systemd, sr.exists("/etc/default/grub"), sizes.kernel
    b.sysctl_engine = "systemd-sysctl" if systemd else "procps"
    _next_cmdline(sr, b, sizes)
    if b.cmdline is None:
        b.notes.append("no boot loader configuration found (no GRUB, BLS entries or "
                       "/etc/kernel/cmdline): the next boot's kernel command line is taken to "
                       "be this boot's")
        b.cmdline = (sr.read("/proc/cmdline") or "").strip()
        b.cmdline_source = "/proc/cmdline (this boot's)"
    b.setters += _kernel_defaults(sr, sizes)
    b.setters += [Setter(k, v, f"kernel command line ({b.cmdline_source})", 0)
                  for k, v in cmdline_knobs(b.cmdline, default_kb, sizes)]
    sysctl = _sysctl_setters(sr, sysctl_files(sr, b.sysctl_engine), default_kb)
    units = _unit_setters(sr, default_kb, systemd)
    tuned = _tuned(sr, b, default_kb, sizes)
    b.setters += sysctl + units + tuned
    if tuned and any("reapply_sysctl" in n for n in b.notes):
        # after its profile TuneD applies the system's sysctl files again: their last value
        # of each knob TuneD's [sysctl] also sets comes last
        for knob in {t.knob for t in tuned if t.source.startswith("TuneD [sysctl]")}:
            mine = [s for s in sysctl if s.knob == knob]
            if mine:
                last = mine[-1]
                b.setters.append(Setter(knob, last.value, last.source + " (re-applied by TuneD)",
                                        4, ordered=False))
    later = [s for s in b.setters if s.stage >= 2]
    for knob in {s.knob for s in later}:
        who = {s.source.split(":")[0] for s in later if s.knob == knob}
        if len(who) > 1:
            b.notes.append(f"{knob} is written at boot by {', '.join(sorted(who))}, in an order "
                           "that is not fixed: the value after boot may be any of theirs")
    return b
