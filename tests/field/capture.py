"""Capture the field's cells (cells.toml) from real servers: each cell's server is started the
way its row says (servers.py, servers_my.py), `hpadvise snapshot --with-environ` reads the
host, and what makes the cell (its processes' /proc entries, their own roots' files as they
were read, its directories) is kept beside the server's own truth as tests/field/cells/ID.tar.xz.
Every server is stopped and every directory and cgroup removed afterwards, also on failure.

Run as root, with the test venv, while nothing else changes the host's servers or knobs:
    .venv/bin/python tests/field/capture.py [ID-PREFIX...]     (none: every cell)
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "fixtures")]

import cells as _cells  # noqa: E402
import servers  # noqa: E402
import servers_my  # noqa: E402
from support import run_cli  # noqa: E402
from trees import BASE  # noqa: E402


def start(cell: _cells.Cell, cleanup: list) -> tuple[dict, tuple[str, ...]]:
    """The cell's server started; (its truth, the directories to keep)."""
    if cell.start == "patroni":
        s = servers.PatroniPg(cell, cleanup)
        return s.truth(), s.dirs()
    if cell.engine == "postgres" and cell.release in servers.HOST_BINDIR:
        s = servers.HostPg(cell, cleanup)
        s.start()
        return s.truth(), s.dirs()
    if cell.engine == "postgres":
        s = servers.root_pg(cell, cleanup)
        s.start()
        return servers.root_pg_truth(s), ()
    if cell.engine == "mysql" and cell.where == "host":
        m = servers_my.host_maria(cell, cleanup)
        return servers_my.host_maria_truth(m), (m.tmp,)
    if cell.engine == "mysql":
        s = servers_my.root_my(cell, cleanup)
        s.start()
        servers_my.root_my_after_start(cell, s)
        return servers_my.root_my_truth(cell, s), ()
    p, d = servers_my.start_java(cell, cleanup)
    # its JDK's release file, which says its version where nothing runs it
    home = os.path.dirname(os.path.dirname(os.path.realpath(
        shutil.which(servers_my.java_binary(cell.release)))))
    return servers_my.java_truth(cell, p), (home, d)


# the host's own files a cell needs beside the base tree's: the mount table (where the
# cgroup hierarchies are)
HOST = ("proc/self/mountinfo",)


def keep(rel: str, pids: set[int], dirs: tuple[str, ...]) -> bool:
    if rel in HOST:
        return True
    parts = rel.split("/")
    return (parts[0] == "proc" and len(parts) > 1 and parts[1].isdigit()
            and int(parts[1]) in pids) or any(rel.startswith(d.lstrip("/") + "/")
                                              for d in dirs)


def pack(cell: _cells.Cell, snap: Path, truth: dict, dirs: tuple[str, ...]) -> int:
    """The cell's part of the snapshot and its truth, as one archive (modes made plain)."""
    pids = set(truth["pids"])
    clash = sorted(p for p in pids if (BASE / "proc" / str(p)).exists())
    if clash:
        raise RuntimeError(f"PIDs {clash} are in the base tree too: capture again")
    _cells.CAPTURED.mkdir(exist_ok=True)
    n = 0
    with tarfile.open(cell.archive, "w:xz") as tar:
        for p in sorted(snap.rglob("*")):
            rel = str(p.relative_to(snap))
            if not keep(rel, pids, dirs) or (p.is_dir() and not p.is_symlink()):
                continue
            info = tar.gettarinfo(str(p), arcname=f"tree/{rel}")
            info.mode = 0o777 if p.is_symlink() else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if p.is_symlink():
                tar.addfile(info)
            else:
                with open(p, "rb") as f:
                    tar.addfile(info, f)
            n += 1
        data = json.dumps({"cell": cell.id, "captured": time.strftime("%Y-%m-%d"),
                           **truth}, indent=1, sort_keys=True).encode()
        info = tarfile.TarInfo("truth.json")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return n


def capture(cell: _cells.Cell) -> None:
    cleanup: list = []
    try:
        truth, dirs = start(cell, cleanup)
        with tempfile.TemporaryDirectory() as tmp:
            snap = Path(tmp) / "snap"
            r = run_cli("snapshot", "--with-environ", str(snap), timeout=300)
            if r.returncode != 0:
                raise RuntimeError(f"snapshot failed: {r.stderr}")
            n = pack(cell, snap, truth, dirs)
        print(f"{cell.id}: {n} files, {cell.archive.stat().st_size // 1024} KiB")
    finally:
        for f in reversed(cleanup):
            try:
                f()
            except Exception as exc:  # the others still run
                print(f"{cell.id}: cleanup: {exc}", file=sys.stderr)


def main() -> int:
    if os.geteuid() != 0:
        print("capture.py: run as root (servers run as their own users)", file=sys.stderr)
        return 2
    want = sys.argv[1:]
    todo = [c for c in _cells.cells() if not want or any(c.id.startswith(w) for w in want)]
    failed = []
    for c in todo:
        try:
            capture(c)
        except Exception as exc:
            failed.append(c.id)
            print(f"{c.id}: FAILED: {exc}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(todo)} cells failed: {' '.join(failed)}",
              file=sys.stderr)
    shutil.rmtree(HERE / "__pycache__", ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
