"""Build hpadvise.pyz: one file a user copies to a host and runs with its own Python
(`python3 hpadvise.pyz check`), nothing installed. It holds hpadvise (built as its wheel is,
with the wheel's metadata: the engines' entry points and the version) and its pure-Python
dependencies, taken from this environment's installed copies (no network). libpq and the
MariaDB/MySQL client library come from the host, as for an installed hpadvise; psycopg and
mysql-connector are not in it (they are optional), nor numpy (`probe` says so).

    python3 scripts/build_pyz.py [OUTPUT]        (default: dist/hpadvise.pyz)

The archive runs on Python 3.9 and later (requires-python in pyproject.toml): the
dependency line in pyproject.toml holds the releases that still run there, so the copies
taken from this environment do too."""

from __future__ import annotations

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
# Without these the archive does not run at all (tomli: on Python 3.9 and 3.10)
NEEDED = ("typer", "rich", "click", "tomli")


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


def build(output: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="hpadvise-pyz-") as tmp:
        tmp = Path(tmp)
        wheel_dir, root = tmp / "wheel", tmp / "root"
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--disable-pip-version-check", "-w", str(wheel_dir), str(REPO)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"build_pyz: building the wheel failed: {r.stderr.strip()[-600:]}")
        [wheel] = wheel_dir.glob("hpadvise-*.whl")
        with zipfile.ZipFile(wheel) as z:  # the package and its dist-info, not the data files
            for n in z.namelist():
                if ".data/" not in n:
                    z.extract(n, root)
        missing = [d for d in PURE if not _copy_dist(d, root)]
        if set(missing) & set(NEEDED):
            raise SystemExit(f"build_pyz: {', '.join(missing)} not installed here: run it "
                             "with the Python of hpadvise's environment with its test extras "
                             "(.venv/bin/python; pip install -e '.[test]')")
        output.parent.mkdir(parents=True, exist_ok=True)
        zipapp.create_archive(root, output, interpreter="/usr/bin/env python3",
                              main="hpadvise.cli:main", compressed=True)
    return output


if __name__ == "__main__":
    out = build(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "dist" / "hpadvise.pyz")
    print(f"{out} ({out.stat().st_size / 1e6:.1f} MB)")
