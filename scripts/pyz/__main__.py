"""hpadvise.pyz's start (written into the archive by scripts/build_pyz.py).

Python cannot keep the bytecode of modules it imports from a zip archive, so every start from
the archive would compile all of hpadvise and its dependencies from source again: about twice
the CPU of an installed hpadvise. Instead the archive unpacks itself once per user into a
cache directory (as shiv and pex do), named by the archive's build id, and runs from there,
where Python keeps the bytecode as it does for any installed package. The cache is
$HPADVISE_PYZ_CACHE, else $XDG_CACHE_HOME/hpadvise, else ~/.cache/hpadvise; it is used only
when it is the user's own and writable by nobody else. HPADVISE_PYZ_CACHE=off, or a cache that
cannot be made, runs from the archive as it is.
"""

import os
import sys


def _cache_base():
    where = os.environ.get("HPADVISE_PYZ_CACHE")
    if where:
        return None if where == "off" else where
    xdg = os.environ.get("XDG_CACHE_HOME")
    home = os.path.expanduser("~")
    if xdg:
        return os.path.join(xdg, "hpadvise")
    return os.path.join(home, ".cache", "hpadvise") if home != "~" else None


def _own(path):
    """A directory of this user's, not writable by group or others."""
    import stat
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _unpacked(archive):
    base = _cache_base()
    if base is None:
        return None
    # the build id through the importer that already read the archive's directory (zipfile
    # is imported only to unpack)
    import zipimport
    importer = sys.path_importer_cache.get(archive) or zipimport.zipimporter(archive)
    build = importer.get_data("hpadvise_pyz_build").decode().strip()
    target = os.path.join(base, "pyz-" + build)
    if os.path.isdir(target):
        return target if _own(target) and _own(base) else None
    os.makedirs(base, mode=0o700, exist_ok=True)
    if not _own(base):
        return None
    import tempfile
    import zipfile
    import shutil
    tmp = tempfile.mkdtemp(prefix=".unpacking-", dir=base)
    try:
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp)
        os.rename(tmp, target)  # whole or not at all; a second start at once may win
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # no half-unpacked copy left (a full disk)
        if not os.path.isdir(target):
            raise
    return target


def _start():
    archive = sys.path[0]
    try:
        here = _unpacked(archive)
    except (OSError, KeyError, ValueError):
        here = None  # run from the archive itself, compiling as it goes
    if here:
        sys.path[0] = here
    from hpadvise.cli import main
    main()


_start()
