"""Profiles: the policy half of a plan, as TOML (shipped ones live in profiles/).

A profile is validated strictly: an unknown key or a wrong type is an InputError naming the
key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import math
try:
    import tomllib
except ImportError:  # Python 3.9 and 3.10: tomli, the parser tomllib was made from
    import tomli as tomllib  # type: ignore[no-redef]
from dataclasses import dataclass, field
from pathlib import Path

from ..facts.sysctls import PLANNED as SYSCTLS
from ..facts.thp_knobs import THP
from ..kit.errors import InputError
from ..kit.sizing import parse_bytes


# Shares of memory (the OS floor, what must stay uncommitted): 0 to 100%. Shares of a
# demand (headroom, the waste 1 GiB pages may round up to) may exceed it, up to tenfold.
PCT = (0, 100)
PCT_OF_DEMAND = (0, 1000)
# key -> (type, allowed values or None, default[, (lowest, highest) for numbers])
SCHEMA: dict[str, dict[str, tuple]] = {
    "": {"name": (str, None, None), "description": (str, None, "")},
    # the THP files as facts/thp_knobs.py declares them: the kernel's words, or "keep"
    "thp": {t.file: (str, t.profile_values, "keep") for t in THP.values()},
    "pool": {"headroom_pct": ((int, float), None, 0, PCT_OF_DEMAND),
             "headroom_min_pages": (int, None, 0, (0, 1 << 30)),
             "os_floor": (str, None, "1GiB"), "os_floor_pct": ((int, float), None, 10, PCT),
             "gigantic": (str, ("auto", "never", "prefer"), "auto"),
             "gigantic_min": (str, None, "32GiB"),
             "gigantic_max_waste_pct": ((int, float), None, 3, PCT_OF_DEMAND)},
    "commit": {"min_free_pct": ((int, float), None, 5, PCT)},
    # the kernel's settings under /proc/sys a plan may change, as facts/sysctls.py declares
    # them: "keep" leaves one alone
    "sysctl": {s.key: ((str, int), ("keep", *s.profile), s.profile_default) for s in SYSCTLS},
}


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    thp: dict  # a THP file ("enabled", "defrag", "shmem_enabled") -> the value, or "keep"
    headroom_pct: float
    headroom_min_pages: int
    os_floor_bytes: int
    os_floor_pct: float
    gigantic: str
    gigantic_min_bytes: int
    gigantic_max_waste_pct: float
    commit_min_free_pct: float
    path: str
    engines: dict  # engine name -> its section, checked against Engine.profile_schema
    sysctl: dict = field(default_factory=dict)  # a declared setting's name -> the value

    def thp_wants(self, file: str) -> str:
        """The profile's value for a top-level THP file ("keep": leave it)."""
        return self.thp.get(file, "keep")

    def wants(self, name: str):
        """The profile's value for a declared sysctl (facts/sysctls.py)."""
        return self.sysctl.get(name, "keep")

    def engine(self, name: str) -> dict:
        return self.engines.get(name, {})

    def os_floor(self, mem_total_bytes: int) -> int:
        """RAM that must stay outside every huge page pool."""
        return max(self.os_floor_bytes, int(mem_total_bytes * self.os_floor_pct / 100))


def _check(data: dict, where: str, schema: dict[str, dict[str, tuple]]) -> dict[str, dict]:
    out: dict[str, dict] = {s: {} for s in schema}
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in schema or key == "":
                raise InputError(f"profile {where}: unknown section [{key}] "
                                 f"(known: {', '.join(s for s in schema if s)})")
            section, items = key, value
        else:
            section, items = "", {key: value}
        for k, v in items.items():
            spec = schema[section].get(k)
            label = f"{section}.{k}" if section else k
            if spec is None:
                raise InputError(f"profile {where}: unknown key {label!r} "
                                 f"(known: {', '.join(schema[section])})")
            typ, allowed = spec[:2]
            if isinstance(v, bool) or not isinstance(v, typ):
                tname = typ.__name__ if isinstance(typ, type) else "number"
                raise InputError(f"profile {where}: {label} must be a {tname}, got {v!r}")
            if allowed is not None and v not in allowed:
                raise InputError(f"profile {where}: {label} = {v!r} is not one of "
                                 f"{', '.join(map(str, allowed))}")
            if len(spec) > 3 and not (math.isfinite(v) and spec[3][0] <= v <= spec[3][1]):
                raise InputError(f"profile {where}: {label} = {v!r} is out of range; give a "
                                 f"number from {spec[3][0]} to {spec[3][1]}")
            out[section][k] = v
    for section, keys in schema.items():
        for k, spec in keys.items():
            out[section].setdefault(k, spec[2])
    if out[""]["name"] is None:
        raise InputError(f"profile {where}: missing key 'name'")
    return out


def _shipped_dir():
    """Where the shipped profiles are installed: a package directory (importlib.resources
    would find the same files but costs ~18 ms to import on every run), or, in the one-file
    hpadvise.pyz, the package inside the archive (importlib.resources reads it there)."""
    from .. import shipped_profiles
    d = Path(shipped_profiles.__path__[0])
    if d.is_dir():
        return d
    from importlib.resources import files
    return files(shipped_profiles)


def shipped() -> list[str]:
    return sorted(p.name[:-5] for p in _shipped_dir().iterdir() if p.name.endswith(".toml"))


def load(name_or_path: str, engine_schemas: dict[str, dict[str, tuple]] | None = None) -> Profile:
    """A shipped profile by name ('oltp') or a TOML file by path. `engine_schemas` adds one
    section per engine (Engine.profile_schema), so plugins own their keys."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or "/" in name_or_path:
        try:
            text = path.read_text()
        except OSError as exc:
            raise InputError(f"cannot read profile {name_or_path}: {exc.strerror}") from None
        where = str(path)
    else:
        res = _shipped_dir() / f"{name_or_path}.toml"
        # by the listing: Python 3.9's zipfile.Path (inside hpadvise.pyz) calls a missing
        # entry a file
        if name_or_path not in shipped():
            raise InputError(f"no profile named {name_or_path!r} (shipped: {', '.join(shipped())};"
                             " or give a path to a .toml file)")
        text, where = res.read_text(), name_or_path
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"profile {where}: not valid TOML: {exc}") from None
    schema = {**SCHEMA, **(engine_schemas or {})}
    s = _check(data, where, schema)
    pool = s["pool"]
    return Profile(
        name=s[""]["name"], description=s[""]["description"],
        thp=dict(s["thp"]),
        headroom_pct=pool["headroom_pct"], headroom_min_pages=pool["headroom_min_pages"],
        os_floor_bytes=parse_bytes(pool["os_floor"], f"profile {where}: pool.os_floor"),
        os_floor_pct=pool["os_floor_pct"], gigantic=pool["gigantic"],
        gigantic_min_bytes=parse_bytes(pool["gigantic_min"], f"profile {where}: pool.gigantic_min"),
        gigantic_max_waste_pct=pool["gigantic_max_waste_pct"],
        commit_min_free_pct=s["commit"]["min_free_pct"],
        path=where, engines={k: s[k] for k in (engine_schemas or {})},
        sysctl={d.name: s["sysctl"][d.key] for d in SYSCTLS},
    )
