"""TuneD's active profile as TuneD itself finds, merges and applies it, and which TuneD is
installed (TuneD 2.x: tuned/profiles/locator.py, loader.py, merger.py, unit.py,
variables.py, units/manager.py).

- Profiles are found in the load directories (tuned-main.conf `profile_dirs`, else
  /usr/lib/tuned/profiles and /etc/tuned/profiles where TuneD installs its profiles there,
  from 2.24, else /usr/lib/tuned and /etc/tuned), the last directory first; a file already
  loaded is passed over, so /etc's profile X that includes X gets /usr/lib's. A profile that
  cannot be found fails the whole load (TuneD then applies nothing), unless its name in
  `include=` starts with `-`. `include=` names are split at `,` and `;`.
- The files are read as TuneD's ConfigParser reads them (`=` only, `#` inline comments,
  indented lines continue a value, no unquoting; boot_sources.ini).
- The include chain is applied parents first. A section of a later profile merges into the
  earlier section of the same name: its options override and extend that unit's, its
  `type`, `enabled` and `devices` replace the earlier ones (a section that does not say them
  gives its defaults: its own name, enabled, every device) and its `priority`,
  `uname_regex` and `cpuinfo_regex` replace them where given; `replace=1` drops the earlier
  unit, `drop=` some of its options. The unit keeps the earlier one's place; a new name comes
  last. [variables] merge into one list (`replace=1` drops the earlier ones), then are
  defined in order, each value expanded with those before it; `include=` there reads a file
  of more. `${name}` of an undefined variable stays as written, and TuneD's own
  `${f:function}` is not known here: an option whose value still holds `${` is not counted.
- A unit that is disabled, or whose `uname_regex` does not match `uname -a` (the system's
  name, host name, release, version and machine) or `cpuinfo_regex` does not match
  /proc/cpuinfo, is not applied. The others are applied in the order of their `priority`
  (tuned-main.conf `default_instance_priority`, 0, where a unit gives none), a stable sort.
  Throughput-performance's [vm.thunderx] (transparent_hugepages=never, for ThunderX arm64
  CPUs only) is such a unit. The regexes came with TuneD 2.13 (tuned-main.conf's
  `uname_string` and `cpuinfo_string` may replace what they are matched against); a regex
  that does not compile, or a priority that is not a number, fails the whole profile. The
  sysctl plugin unquotes a value in double quotes.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from dataclasses import dataclass

from .boot_sources import ini
from .sysroot import SysRoot

# where TuneD's Python package is installed, per distribution: the version is in its version.py
PACKAGES = ("dist-packages", "site-packages")
# the load directories (consts.py): from 2.24 its profiles live in a directory of their own
NEW_DIRS = ("/usr/lib/tuned/profiles", "/etc/tuned/profiles")
OLD_DIRS = ("/usr/lib/tuned", "/etc/tuned")
_TRUE = ("True", "true", "1")  # unit.py's very words for enabled and replace


@dataclass(frozen=True)
class Option:
    """One option of the merged profile, as TuneD applies it."""
    unit: str  # the section's name: a child profile's section of this name merges into it
    plugin: str  # the unit's type, its name unless `type=` says otherwise
    key: str
    value: str  # ${variables} expanded
    file: str  # the profile file of the value the merge kept
    line: int  # and its line

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Profile:
    files: tuple[str, ...]  # the include chain, parents first
    options: tuple[Option, ...]  # the applied ones, in the order TuneD applies them
    notes: tuple[str, ...]  # units not applied here, and why; what could not be told
    reapply_sysctl: bool  # TuneD applies the system's sysctl files again after its own
    dirs: tuple[str, ...]  # the load directories, the one TuneD looks in first last
    # why TuneD applies none of it (a profile it cannot find, a unit that fails the whole
    # profile), or None: a child profile including it would fail the same way
    refused: str | None = None


def version(sr: SysRoot) -> tuple[int, int] | None:
    """(major, minor) of the installed TuneD, from its package's version.py (the newest where
    a leftover of another Python holds an older one)."""
    found = []
    for lib in ("/usr/lib", "/usr/lib64"):
        for py in sorted(n for n in sr.listdir(lib) if n.startswith("python")):
            for pkg in PACKAGES:
                text = sr.read(f"{lib}/{py}/{pkg}/tuned/version.py", quiet_missing=True)
                got = {k: int(v) for k, v in re.findall(
                    r"^TUNED_VERSION_(MAJOR|MINOR)\s*=\s*(\d+)", text or "", re.M)}
                if len(got) == 2:
                    found.append((got["MAJOR"], got["MINOR"]))
    return max(found) if found else None


def takes_regexes(v: tuple[int, int] | None) -> bool:
    """uname_regex, cpuinfo_regex and drop= came with TuneD 2.13 (profiles/unit.py); an older
    TuneD takes them for options of the plugin and applies the unit everywhere."""
    return v is None or v >= (2, 13)


def main_conf(sr: SysRoot) -> dict[str, tuple[str, int]]:
    return ini("[main]\n" + (sr.read("/etc/tuned/tuned-main.conf", quiet_missing=True)
                             or ""))["main"]


def load_dirs(sr: SysRoot, main: dict[str, tuple[str, int]]) -> tuple[str, ...]:
    given = main.get("profile_dirs", ("", 0))[0]
    if given.strip():  # global_config.py get_list
        return tuple(x.strip() for x in re.split(r",|;", given))
    return NEW_DIRS if sr.exists(NEW_DIRS[0]) else OLD_DIRS


def _chain(sr: SysRoot, names: list[str], dirs: tuple[str, ...], done: list[str],
           depth: int = 0) -> str | None:
    """Profile files into `done`, parents first, as loader.py loads them; where a profile
    cannot be found (TuneD then loads none), what is missing, else None."""
    for name in names:
        conditional, name = name.startswith("-"), name.lstrip("-")
        path, skipped = None, False
        for d in reversed(dirs):
            f = os.path.normpath(f"{d}/{os.path.basename(name)}/tuned.conf")
            skipped = skipped or f in done
            if f not in done and sr.exists(f):
                path = f
                break
        if path is None or depth > 10:
            if conditional or (skipped and path is None):  # locator.py: "" is passed over
                continue
            return (f"TuneD cannot find profile {name!r} in {', '.join(reversed(dirs))}: it "
                    "loads no profile")
        done.append(path)
        inc = ini(sr.read(path) or "").get("main", {}).get("include", ("", 0))[0]
        missing = _chain(sr, [x for x in re.split(r"\s*[,;]\s*", inc.strip()) if x], dirs,
                         done, depth + 1) if inc else None
        if missing:
            return missing
        done.remove(path)  # the parents come first in the chain
        done.append(path)
    return None


class _Unit:
    def __init__(self, name: str, keys: dict[str, tuple[str, int]], where: str):
        cfg = OrderedDict(keys)
        pop = (lambda k: cfg.pop(k)[0] if k in cfg else None)
        self.name = name
        self.priority = pop("priority")
        self.type = pop("type") or name
        self.enabled = pop("enabled") in (None, *_TRUE)
        self.replace = pop("replace") in _TRUE
        self.drop = re.split(r"\b\s*[,;]\s*", pop("drop") or "") if "drop" in cfg else []
        self.uname = pop("uname_regex")
        self.cpuinfo = pop("cpuinfo_regex")
        for k in ("devices", "devices_udev_regex", "script_pre", "script_post", "prepend"):
            cfg.pop(k, None)
        self.options = OrderedDict((k, (v, where, n)) for k, (v, n) in cfg.items())

    def merge(self, later: _Unit) -> None:
        self.type, self.enabled = later.type, later.enabled
        self.priority = later.priority if later.priority is not None else self.priority
        self.uname = later.uname if later.uname is not None else self.uname
        self.cpuinfo = later.cpuinfo if later.cpuinfo is not None else self.cpuinfo
        for k in later.drop:
            self.options.pop(k, None)
        self.options.update(later.options)


def _expand(value: str, lookup: dict[str, str]) -> str:
    """variables.py expand_static: ${name} of a defined variable, `\\${` unescaped."""
    out = re.sub(r"(?<!\\)\$\{(\w+)\}", lambda m: lookup.get(m.group(1), m.group(0)), value)
    return re.sub(r"\\(\$\{\w+\})", r"\1", out)


def _variables(sr: SysRoot, merged: OrderedDict) -> dict[str, str]:
    """variables.py add_from_cfg: each defined in order, expanded with those before it."""
    lookup: dict[str, str] = {}

    def add(k: str, v: str) -> None:
        if re.match(r"\w+$", k):
            lookup[k] = _expand(v, lookup)
    for k, v in merged.items():
        if k == "include":
            text = sr.read(os.path.normpath(v), quiet_missing=True) or ""
            for k2, (v2, _) in ini("[variables]\n" + text).get("variables", {}).items():
                add(k2, v2)
        else:
            add(k, v)
    return lookup


def _uname(sr: SysRoot) -> str | None:
    """What TuneD's uname_regex is matched against: " ".join(os.uname()); on a captured tree,
    the kernel's own files (the machine from kernel.arch, or a release that ends in it)."""
    if sr.live:
        return " ".join(os.uname())
    kernel = {f: (sr.read(f"/proc/sys/kernel/{f}", quiet_missing=True) or "").strip()
              for f in ("ostype", "hostname", "osrelease", "version", "arch")}
    mt = re.search(r"\.(x86_64|aarch64|ppc64le|s390x|riscv64)$", kernel["osrelease"])
    machine = kernel["arch"] or (mt.group(1) if mt else "")
    if not machine:
        return None
    return " ".join([kernel["ostype"] or "Linux", kernel["hostname"], kernel["osrelease"],
                     kernel["version"], machine])


class Refused(Exception):
    """What makes TuneD refuse the whole profile (units/manager.py create() raises)."""


def _applies(u: _Unit, facts: dict, lookup: dict) -> tuple[bool, str | None]:
    """Whether TuneD applies the unit here, and a note where that is not known for sure."""
    unknown = []
    for what, regex in (("uname_regex", u.uname), ("cpuinfo_regex", u.cpuinfo)):
        if regex is None:
            continue
        pattern = _expand(regex, lookup)
        if "${" in pattern or facts[what] is None:
            unknown.append(what)
            continue
        try:
            if not re.search(pattern, facts[what], re.M):
                return False, f"TuneD does not apply [{u.name}]: its {what} does not match"
        except re.error:
            raise Refused(f"[{u.name}]'s {what} is not a valid regular expression") from None
    if unknown:
        return True, (f"whether TuneD applies [{u.name}] here is not known: its "
                      f"{' and '.join(unknown)} could not be matched here; taken to apply")
    return True, None


def profile(sr: SysRoot, names: list[str], ver: tuple[int, int] | None) -> Profile:
    """TuneD's merged profile `names` as TuneD `ver` (version()) loads and applies it."""
    main = main_conf(sr)
    dirs = load_dirs(sr, main)
    notes: list[str] = []
    files: list[str] = []
    refused = _chain(sr, names, dirs, files)
    notes += [refused] if refused else []
    found = refused is None
    units: OrderedDict[str, _Unit] = OrderedDict()
    merged_vars: OrderedDict[str, str] = OrderedDict()
    for f in files if found else []:
        for sec, keys in ini(sr.read(f) or "").items():
            if sec == "main":
                continue
            if sec == "variables":
                if keys.get("replace", ("", 0))[0] in _TRUE:
                    merged_vars.clear()
                merged_vars.update((k, v) for k, (v, _) in keys.items()
                                   if k not in ("replace", "prepend"))
                continue
            u = _Unit(sec, keys, f)
            if u.replace or sec not in units:
                units[sec] = u
            else:
                units[sec].merge(u)
    lookup = _variables(sr, merged_vars)
    default = main.get("default_instance_priority", ("0", 0))[0]
    reapply = main.get("reapply_sysctl", ("1", 0))[0].lower() not in ("0", "false", "no")
    # tuned-main.conf may give the strings the regexes are matched against (consts.py)
    facts = {"uname_regex": main.get("uname_string", (None, 0))[0] or _uname(sr),
             "cpuinfo_regex": main.get("cpuinfo_string", (None, 0))[0]
             or sr.read("/proc/cpuinfo", quiet_missing=True)}
    regexes = takes_regexes(ver)
    applied: list[tuple[int, _Unit]] = []
    try:
        for u in units.values():
            if not u.enabled:
                notes.append(f"TuneD's [{u.name}] is disabled (enabled=false)")
                continue
            ok, note = _applies(u, facts, lookup) if regexes else (True, None)
            if note:
                notes.append(note)
            if ok:
                try:
                    applied.append((int(u.priority if u.priority is not None else default), u))
                except ValueError:
                    raise Refused(f"[{u.name}]'s priority {u.priority!r} is not a number") \
                        from None
    except Refused as why:
        refused = f"TuneD refuses the profile: {why}; it applies none of it"
        notes.append(refused)
        applied = []
    applied.sort(key=lambda pu: pu[0])
    options = []
    for _, u in applied:
        for k, (v, file, line) in u.options.items():
            value = _expand(v, lookup)
            if u.type == "sysctl":  # plugin_sysctl.py unquotes
                value = re.sub(r'^"(.*)"$', r"\1", value)
            if "${" in value:
                notes.append(f"TuneD's {k} in [{u.name}] ({file}:{line}) is {value!r}: a variable "
                             "not defined or a function of TuneD's, not counted here")
                continue
            options.append(Option(u.name, u.type, k, value, file, line))
    return Profile(tuple(files), tuple(options), tuple(notes), reapply, dirs, refused)
