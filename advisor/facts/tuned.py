"""TuneD's active profile as TuneD itself merges and applies it, and which TuneD is installed.

What is merged and applied, and in what order (TuneD 2.x: tuned/profiles/merger.py, unit.py,
units/manager.py):
- The include chain is applied parents first (`include=` in [main]). A section of a later
  profile merges into the earlier section of the same name: its options override and extend
  that unit's, its `type`, `enabled` and `devices` replace the earlier ones (a section that
  does not say them gives its defaults: its own name, enabled, every device) and its
  `priority`, `uname_regex` and `cpuinfo_regex` replace them where given; `replace=1` drops
  the earlier unit, `drop=` some of its options. The unit keeps the earlier one's place; a
  new name comes last.
- [variables] are merged the same way, and `${name}` in a value is one of them.
- A unit that is disabled, or whose `uname_regex` does not match `uname -a` (the system's
  name, host name, release, version and machine) or `cpuinfo_regex` does not match
  /proc/cpuinfo, is not applied. The others are applied in the order of their `priority`
  (tuned-main.conf `default_instance_priority`, 0, where a unit gives none), a stable sort.
  Throughput-performance's [vm.thunderx] (transparent_hugepages=never, for ThunderX arm64
  CPUs only) is such a unit.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass

from .boot_sources import ini, tuned_chain
from .sysroot import SysRoot

# where TuneD's Python package is installed, per distribution: the version is in its version.py
PACKAGES = ("dist-packages", "site-packages")


@dataclass(frozen=True)
class Option:
    """One option of the merged profile, as TuneD applies it."""
    unit: str  # the section's name: a child profile's section of this name merges into it
    plugin: str  # the unit's type, its name unless `type=` says otherwise
    key: str
    value: str  # ${variables} expanded
    where: str  # file:line of the value the merge kept


@dataclass(frozen=True)
class Profile:
    files: tuple[str, ...]  # the include chain, parents first
    options: tuple[Option, ...]  # the applied ones, in the order TuneD applies them
    notes: tuple[str, ...]  # units not applied here, and why; what could not be told
    reapply_sysctl: bool  # TuneD applies the system's sysctl files again after its own


def version(sr: SysRoot) -> tuple[int, int] | None:
    """(major, minor) of the installed TuneD, from its package's version.py."""
    for lib in ("/usr/lib", "/usr/lib64"):
        for py in sorted(n for n in sr.listdir(lib) if n.startswith("python")):
            for pkg in PACKAGES:
                text = sr.read(f"{lib}/{py}/{pkg}/tuned/version.py", quiet_missing=True)
                got = {k: int(v) for k, v in re.findall(
                    r"^TUNED_VERSION_(MAJOR|MINOR)\s*=\s*(\d+)", text or "", re.M)}
                if len(got) == 2:
                    return got["MAJOR"], got["MINOR"]
    return None


class _Unit:
    def __init__(self, name: str, keys: dict[str, tuple[str, int]], where: str):
        cfg = OrderedDict(keys)
        pop = (lambda k: cfg.pop(k)[0] if k in cfg else None)
        self.name = name
        self.priority = pop("priority")
        self.type = pop("type") or name
        self.enabled = pop("enabled") in (None, "True", "true", "1")  # unit.py's very words
        self.replace = pop("replace") in ("True", "true", "1")
        self.drop = re.split(r"\b\s*[,;]\s*", pop("drop") or "") if "drop" in cfg else []
        self.uname = pop("uname_regex")
        self.cpuinfo = pop("cpuinfo_regex")
        for k in ("devices", "devices_udev_regex", "script_pre", "script_post", "prepend"):
            cfg.pop(k, None)
        self.options = OrderedDict((k, (v, f"{where}:{n}")) for k, (v, n) in cfg.items())

    def merge(self, later: _Unit) -> None:
        self.type, self.enabled = later.type, later.enabled
        self.priority = later.priority if later.priority is not None else self.priority
        self.uname = later.uname if later.uname is not None else self.uname
        self.cpuinfo = later.cpuinfo if later.cpuinfo is not None else self.cpuinfo
        for k in later.drop:
            self.options.pop(k, None)
        self.options.update(later.options)


def _expand(value: str, variables: dict[str, str]) -> str | None:
    """${name} from [variables] (TuneD's own ${f:function} and ${i:...}: None, not known)."""
    for _ in range(10):  # a variable may name others
        if "${" not in value:
            return value
        if re.search(r"\$\{[fi]:", value):
            return None
        value = re.sub(r"\$\{([^}]+)\}", lambda m: variables.get(m.group(1), ""), value)
    return None


def _uname(sr: SysRoot) -> str | None:
    """What `uname -a` gives TuneD's uname_regex: " ".join(os.uname())."""
    parts = [sr.read(f"/proc/sys/kernel/{f}", quiet_missing=True)
             for f in ("ostype", "hostname", "osrelease", "version", "arch")]
    return " ".join(p.strip() for p in parts) if all(parts) else None


def profile(sr: SysRoot, names: list[str]) -> Profile:
    files = tuned_chain(sr, names)
    units: OrderedDict[str, _Unit] = OrderedDict()
    variables: dict[str, str] = {}
    for f in files:
        for sec, keys in ini(sr.read(f) or "").items():
            if sec == "main":
                continue
            if sec == "variables":
                variables.update({k: v for k, (v, _) in keys.items()})
                continue
            u = _Unit(sec, keys, f)
            if u.replace or sec not in units:
                units[sec] = u
            else:
                units[sec].merge(u)
    main = ini("[main]\n" + (sr.read("/etc/tuned/tuned-main.conf", quiet_missing=True)
                             or ""))["main"]
    default = main.get("default_instance_priority", ("0", 0))[0]
    reapply = main.get("reapply_sysctl", ("1", 0))[0].lower() not in ("0", "false", "no")
    notes: list[str] = []
    applied: list[tuple[int, _Unit]] = []
    facts = {"uname_regex": _uname(sr), "cpuinfo_regex": sr.read("/proc/cpuinfo",
                                                                 quiet_missing=True)}
    for u in units.values():
        if not u.enabled:
            notes.append(f"TuneD's [{u.name}] is disabled (enabled=false)")
            continue
        skip = None
        for what, regex in (("uname_regex", u.uname), ("cpuinfo_regex", u.cpuinfo)):
            if regex is None or skip:
                continue
            pattern = _expand(regex, variables)
            if pattern is None or facts[what] is None:
                notes.append(f"whether TuneD applies [{u.name}] here is not known: its "
                             f"{what} could not be matched here; taken to apply")
                continue
            try:
                if not re.search(pattern, facts[what], re.M):
                    skip = f"its {what} does not match this host"
            except re.error:
                skip = f"its {what} is not a valid regular expression"
        if skip:
            notes.append(f"TuneD does not apply [{u.name}]: {skip}")
            continue
        try:
            applied.append((int(u.priority if u.priority is not None else default), u))
        except ValueError:
            applied.append((0, u))
    applied.sort(key=lambda pu: pu[0])
    options = []
    for _, u in applied:
        for k, (v, where) in u.options.items():
            value = _expand(v, variables)
            if value is None:
                notes.append(f"TuneD's {k} in [{u.name}] ({where}) uses a function of "
                             "TuneD's: its value is not known here")
                continue
            options.append(Option(u.name, u.type, k, value, where))
    return Profile(tuple(files), tuple(options), tuple(notes), reapply)
