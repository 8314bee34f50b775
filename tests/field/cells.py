"""The field table (cells.toml) as data: every cell with its id and its words, for the capture
script, the replay tests and the support matrix page."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.9 and 3.10: the same parser, as the product reads its profiles
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
TABLE = HERE / "cells.toml"
CAPTURED = HERE / "cells"  # ID.tar.xz: the snapshot and truth.json, by capture.py


@dataclass(frozen=True)
class Cell:
    engine: str
    release: str
    start: str
    settings: str
    where: str
    refused: str = ""

    @property
    def id(self) -> str:
        return f"{self.engine}-{self.release}-{self.start}-{self.settings}-{self.where}" \
            .replace("_", "-").replace(".", "")

    @property
    def archive(self) -> Path:
        return CAPTURED / f"{self.id}.tar.xz"


def table() -> dict:
    return tomllib.loads(TABLE.read_text())


def cells() -> list[Cell]:
    t = table()
    out = []
    for group in t["cell"]:
        for row in group["cells"]:
            c = Cell(group["engine"], *row)
            for col, key in (("start", c.start), ("settings", c.settings), ("where", c.where)):
                if key not in t[col + "s" if col == "start" else col]:
                    raise ValueError(f"cell {c.id}: {col} {key!r} is not in [{col}]")
            out.append(c)
    ids = [c.id for c in out]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"cells listed twice: {sorted(dup)}")
    return out


def expectation(c: Cell) -> str:
    """What hpadvise must report and do for the cell, in words (the table's [expect])."""
    t = table()["expect"]
    return t["cgroup"] if c.where == "cgroup" else t[c.settings]
