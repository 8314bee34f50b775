"""Installed distributions as the start of every command needs them: the engines' entry points
and hpadvise's own version, read straight from the distributions' metadata directories.

importlib.metadata answers the same questions, but importing it (with the email parser it
needs) costs ~25 ms on each run of `check`, a tenth of its time budget. The files read here are
the ones it reads: `<name>.dist-info/entry_points.txt` and `METADATA` (or `.egg-info` and
`PKG-INFO`) in each sys.path directory, in the formats the Python Packaging Authority
specifies ("Entry points specification": an INI file of [group] sections with `name = object
reference` lines; "Core metadata specifications": `Version:` among the headers). The first
distribution of a name on sys.path wins, as for imports.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

_META = re.compile(r"^(?P<name>[^-]+)(-.*)?\.(dist-info|egg-info)$")


@dataclass(frozen=True)
class EntryPoint:
    name: str
    value: str  # "module:attribute"
    dist: str

    def load(self):
        import importlib
        module, _, attr = self.value.partition(":")
        obj = importlib.import_module(module.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        return obj


def _normal(name: str) -> str:
    # Names compare normalised (PEP 503: runs of -, _ and . are one "-", any case).
    return re.sub(r"[-_.]+", "-", name).lower()


def _dists() -> list[tuple[str, str]]:
    """(normalised name, metadata directory) of every distribution on sys.path, first wins."""
    seen, out = set(), []
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for n in names:
            m = _META.match(n)
            if m and _normal(m["name"]) not in seen:
                seen.add(_normal(m["name"]))
                out.append((_normal(m["name"]), os.path.join(entry or ".", n)))
    return out


def entry_points(group: str) -> list[EntryPoint]:
    out = []
    for dist, path in _dists():
        try:
            with open(os.path.join(path, "entry_points.txt"), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        section = None
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1].strip()
            elif section == group and "=" in line:
                name, _, value = line.partition("=")
                value = value.split("[", 1)[0]  # extras are not loaded here
                out.append(EntryPoint(name.strip(), value.strip(), dist))
    return out


def version(name: str) -> str | None:
    """The installed version of a distribution, None when it is not installed."""
    want = _normal(name)
    for dist, path in _dists():
        if dist != want:
            continue
        for meta in ("METADATA", "PKG-INFO"):
            try:
                with open(os.path.join(path, meta), encoding="utf-8") as f:
                    for line in f:
                        if line.startswith("Version:"):
                            return line.split(":", 1)[1].strip()
                        if not line.strip():
                            break  # the headers end at the first empty line
            except OSError:
                continue
        return None
    return None
