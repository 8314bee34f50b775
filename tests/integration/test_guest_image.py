"""The amd64 guest's image (scripts/guest.sh build), built once and cached outside the checkout:
Debian's kernel and initrd beside a root file system holding systemd, PostgreSQL 15 and the
lab's own unit. Building touches nothing of the host's (debootstrap runs in namespaces of its
own, the files go to the cache only), so this test is contained: it runs in the worker
beside the host's tests, early in the run, and the two-node guest's test later finds the
image made instead of building it on the host's time."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
GUEST = Path(__file__).resolve().parents[2] / "scripts" / "guest.sh"
# what the labs need inside the image: systemd as PID 1, the server, the unit that runs them
NEEDED = ("/lib/systemd/systemd", "/usr/lib/postgresql/15/bin/postgres",
          "/etc/systemd/system/hpadvise-lab.service", "/usr/local/sbin/hpadvise-lab")


def test_the_guest_image_is_built_with_what_the_labs_need():
    if os.geteuid() != 0:
        pytest.skip("the guest's image is built with debootstrap: needs root")
    for tool in ("debootstrap", "debugfs"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} not found: run scripts/test.sh, which installs it")
    b = subprocess.run([str(GUEST), "build", "amd64"], capture_output=True, text=True,
                       timeout=3600)
    assert b.returncode == 0, b.stderr[-2000:]
    d = Path(b.stdout.strip().splitlines()[-1])
    assert (d / "vmlinuz").stat().st_size > 1 << 20 and (d / "initrd").stat().st_size > 1 << 20
    img = d / "root.img"
    for path in NEEDED:  # read from the image itself, not assumed
        r = subprocess.run(["debugfs", "-R", f"stat {path}", str(img)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0 and "Inode:" in r.stdout, (path, r.stdout[-300:] + r.stderr)
