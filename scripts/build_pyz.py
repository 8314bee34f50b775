"""Build hpadvise.pyz: one file a user copies to a host and runs with its own Python
(`python3 hpadvise.pyz check`), nothing installed. It holds hpadvise (built as its wheel is,
with the wheel's metadata: the engines' entry points and the version) and its pure-Python
dependencies, taken from this environment's installed copies (tomli, which a Python 3.11+
environment lacks, from the package index). libpq and the MariaDB/MySQL client library come
from the host, as for an installed hpadvise; psycopg and mysql-connector are not in it (they
are optional), nor numpy (`probe` says so). It starts by unpacking itself once per user into
a cache and running from there (scripts/pyz/__main__.py), so that Python keeps its bytecode.

    python3 scripts/build_pyz.py [OUTPUT]        (default: dist/hpadvise.pyz)

The archive runs on Python 3.9 and later (requires-python in pyproject.toml): the
dependency line in pyproject.toml holds the releases that still run there, so the copies
taken from this environment do too."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipapp
import zipfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# hpadvise's runtime dependencies that are pure Python, and theirs
# (tomli: the TOML parser of Pythons before 3.11, which have no tomllib)
PURE = ("typer", "rich", "shellingham", "markdown-it-py", "mdurl", "pygments",
        "typing-extensions", "annotated-doc", "click", "tomli")
# Without these the archive does not run at all (tomli, on Python 3.9 and 3.10, is fetched
# from the package index where this Python has tomllib and no tomli installed)
NEEDED = ("typer", "rich", "click")


def _copy_dist(name: str, into: Path) -> bool:
    """An installed distribution's files (its packages and its dist-info) into `into`;
    False where it is not installed here."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    for f in dist.files or ():
        src = Path(dist.locate_file(f))
        if f.parts[0] == ".." or "__pycache__" in f.parts or f.suffix == ".pyc" \
                or not src.is_file():
            continue
        dest = into / f
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    return True


# tomli as pyproject.toml asks for it (its line for Pythons before 3.11)
TOMLI = "tomli>=2.0"


def _fetch_wheel(spec: str, into: Path, root: Path) -> None:
    """A pure-Python wheel from the package index, unpacked into the archive's root."""
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--only-binary=:all:", "--disable-pip-version-check", "-d", str(into),
                        spec], capture_output=True, text=True)
    wheels = list(into.glob("*.whl")) if r.returncode == 0 else []
    if not wheels:
        raise SystemExit(f"build_pyz: {spec} is not installed here and could not be downloaded "
                         f"({r.stderr.strip()[-300:] or 'no wheel'}); install it "
                         f"(pip install '{spec}') and build again")
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(root)


def build(output: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="hpadvise-pyz-") as tmp:
        tmp = Path(tmp)
        wheel_dir, root = tmp / "wheel", tmp / "root"
        # pip builds in the checkout (its build/ directory): one build of it at a time, or
        # two at once (scripts/field.sh takes the same lock) trip over each other's files
        (REPO / "build").mkdir(exist_ok=True)
        with open(REPO / "build" / ".wheel.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                                "--disable-pip-version-check", "-w", str(wheel_dir),
                                str(REPO)], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"build_pyz: building the wheel failed: {r.stderr.strip()[-600:]}")
        [wheel] = wheel_dir.glob("hpadvise-*.whl")
        with zipfile.ZipFile(wheel) as z:  # the package and its dist-info, not the data files
            for n in z.namelist():
                if ".data/" not in n:
                    z.extract(n, root)
        missing = [d for d in PURE if not _copy_dist(d, root)]
        if "tomli" in missing:  # a Python with tomllib (3.11+) has no tomli installed:
            missing.remove("tomli")  # the archive's Pythons before 3.11 need it, from PyPI
            _fetch_wheel(TOMLI, tmp / "tomli", root)
        if set(missing) & set(NEEDED):
            raise SystemExit(f"build_pyz: {', '.join(missing)} not installed here: run it "
                             "with the Python of hpadvise's environment with its test extras "
                             "(.venv/bin/python; pip install -e '.[test]')")
        # the start: unpack once per user into a cache and run from there (pyz/__main__.py),
        # under an id of what the archive holds
        shutil.copyfile(REPO / "scripts" / "pyz" / "__main__.py", root / "__main__.py")
        digest = hashlib.sha256()
        for f in sorted(p for p in root.rglob("*") if p.is_file()):
            digest.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
        (root / "hpadvise_pyz_build").write_text(digest.hexdigest()[:16] + "\n")
        output.parent.mkdir(parents=True, exist_ok=True)
        zipapp.create_archive(root, output, interpreter="/usr/bin/env python3",
                              compressed=True)
    return output


if __name__ == "__main__":
    out = build(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "dist" / "hpadvise.pyz")
    print(f"{out} ({out.stat().st_size / 1e6:.1f} MB)")
