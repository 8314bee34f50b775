"""The host's side of the amd64 guest lab (scripts/guest.sh): build the image once, put
hpadvise (with its pure-Python dependencies at the versions installed here; the guest's
Python has psycopg from Debian) and a lab driver into a share, boot, and read what the driver
wrote. Used by the guest tests in tests/integration."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
GUEST = REPO / "scripts" / "guest.sh"
DEPS = ("typer", "rich", "shellingham", "markdown-it-py", "mdurl", "pygments",
        "typing-extensions", "annotated-doc", "click")


def pinned() -> list[str]:
    from importlib import metadata
    out = []
    for name in DEPS:
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return out


def run_lab(share: Path, driver: str, cases: tuple[str, ...], qemu: list[str],
            env: dict | None = None, booted=contextlib.nullcontext) -> dict:
    """Build (once) and boot the amd64 guest with tests/guests/`driver` in `share`, running
    `cases`; its result.json, each case's error failing the test. `env`: guest.sh's own
    settings (HPADVISE_GUEST_SUITE, ...); `booted`: a context held while the guest runs."""
    import pytest
    if os.geteuid() != 0:
        pytest.skip("the guest lab builds its image with debootstrap: needs root")
    for tool in ("qemu-system-x86_64", "debootstrap"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} not found: run scripts/test.sh, which installs it")
    env = {**os.environ, **(env or {})}
    b = subprocess.run([str(GUEST), "build", "amd64"], capture_output=True, text=True,
                       timeout=3600, env=env)
    assert b.returncode == 0, b.stderr[-2000:]
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                          "--disable-pip-version-check", "--target", str(share / "pylib"),
                          str(REPO), *pinned()], capture_output=True, text=True, timeout=600,
                         cwd=share)
    assert pip.returncode == 0, pip.stderr[-2000:]
    for f in (driver, "guestlab.py"):
        shutil.copy(REPO / "tests" / "guests" / f, share / f)
    (share / "run.sh").write_text("export PYTHONPATH=/share/pylib\n"
                                  f"python3 /share/{driver} {' '.join(cases)}\n")
    with booted():
        r = subprocess.run([str(GUEST), "run", "amd64", str(share), *qemu],
                           capture_output=True, text=True, timeout=2400, env=env)
    out = (share / "out.log").read_text() if (share / "out.log").exists() else ""
    assert r.returncode == 0, r.stderr[-2000:] + out[-3000:]
    result = json.loads((share / "result.json").read_text())
    for case in cases:
        assert "error" not in result.get(case, {}), (case, result.get(case))
    return result
