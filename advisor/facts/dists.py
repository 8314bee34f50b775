"""Installed distributions as the start of every command needs them: the engines' entry points
and hpadvise's own version, read straight from the distributions' metadata directories.

importlib.metadata answers the same questions, but importing it (with the email parser it
needs) costs ~25 ms on each run of `check`, a tenth of its time budget. The files read here are
the ones it reads: `<name>.dist-info/entry_points.txt` and `METADATA` (or `.egg-info` and
`PKG-INFO`) in each sys.path directory, in the formats the Python Packaging Authority
specifies ("Entry points specification": an INI file of [group] sections with `name = object
reference` lines; "Core metadata specifications": `Version:` among the headers). The first
distribution of a name on sys.path wins, as for imports. A zip archive on sys.path (the
one-file `hpadvise.pyz`, scripts/build_pyz.py) is read as a directory, as zipimport reads it.
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


def _listing(entry: str) -> list[str]:
    """The names at the top of a sys.path entry: a directory, or a zip archive's."""
    try:
        return sorted(os.listdir(entry or "."))
    except NotADirectoryError:
        import zipfile
        try:
            with zipfile.ZipFile(entry) as z:
                return sorted({n.split("/", 1)[0] for n in z.namelist()})
        except (OSError, zipfile.BadZipFile):
            return []
    except OSError:
        return []


def _read(path: str, name: str) -> str:
    """A metadata file of a distribution (`path`: its directory, inside a zip archive or
    not); OSError when it has none."""
    archive = os.path.dirname(path)
    if os.path.isfile(archive):
        import zipfile
        try:
            with zipfile.ZipFile(archive) as z:
                return z.read(f"{os.path.basename(path)}/{name}").decode("utf-8")
        except (KeyError, zipfile.BadZipFile) as exc:
            raise OSError(str(exc)) from None
    with open(os.path.join(path, name), encoding="utf-8") as f:
        return f.read()


def _dists() -> list[tuple[str, str]]:
    """(normalised name, metadata directory) of every distribution on sys.path, first wins."""
    seen, out = set(), []
    for entry in sys.path:
        for n in _listing(entry):
            m = _META.match(n)
            if m and _normal(m["name"]) not in seen:
                seen.add(_normal(m["name"]))
                out.append((_normal(m["name"]), os.path.join(entry or ".", n)))
    return out


def entry_points(group: str) -> list[EntryPoint]:
    out = []
    for dist, path in _dists():
        try:
            text = _read(path, "entry_points.txt")
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
                text = _read(path, meta)
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
                if not line.strip():
                    break  # the headers end at the first empty line
        return None
    return None
