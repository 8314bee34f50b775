"""Write what a recording SysRoot read as a tree that `SysRoot(tree)` reads back the same way.

Used for offline audits (`hpadvise check --root DIR`) and to capture the unit-test fixtures
from real machines (tests/fixtures/README.md)."""

from __future__ import annotations

import os
from pathlib import Path

from .sysroot import SysRoot


def write_snapshot(sr: SysRoot, directory: str) -> int:
    if sr.recorded is None:
        raise ValueError("SysRoot was not recording")
    out = Path(directory)
    for p in sr.listed or ():
        (out / p.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for p, data in sr.recorded.items():
        dest = out / p.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        # /proc/self is a symlink on the host; in a snapshot it is a plain directory.
        dest.write_bytes(data)
        os.chmod(dest, 0o644)
    return len(sr.recorded)
