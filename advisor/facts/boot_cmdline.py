"""The next boot's kernel and its command line, as the boot loader will start them: GRUB's
generated config (the default entry, its first), else the newest BLS entry
(/boot/loader/entries, sd-boot's and grubby's default), else /etc/kernel/cmdline, and
/etc/default/grub (what `update-grub` will generate next); and the huge page and THP knobs the
command line sets (Documentation/admin-guide/kernel-parameters.txt)."""

from __future__ import annotations

import re
import shlex
from typing import NamedTuple

from ..kit.knob_id import KnobId
from ..kit.sizing import cmdline_kb
from .boot_sources import grub_default
from .sysroot import SysRoot
from .thp_knobs import THP as DECLARED_THP, SizesAtBoot


def cmdline_knobs(cmdline: str, default_kb: int | None,
                  sizes: SizesAtBoot | None = None) -> list[tuple[KnobId, str]]:
    """(knob, value) from kernel parameters: `hugepages=N` reserves N pages of the size named
    by the `hugepagesz=` before it, or of the default size (`default_hugepagesz=` or the
    architecture's); `hugepages=0:N,1:M` is per node (summed); transparent_hugepage(_shmem)=
    set the THP modes, thp_anon= and thp_shmem= the per-size ones, where the kernel of `sizes`
    takes them (thp_knobs.py; kernel-parameters.txt)."""
    out: list[tuple[KnobId, str]] = []
    params: list[tuple[str, str]] = []
    size_kb: int | None = None
    default = default_kb or 2048
    try:
        tokens = shlex.split(cmdline or "", posix=True)
    except ValueError:
        tokens = (cmdline or "").split()
    for tok in tokens:
        if tok == "--":  # what follows is init's, not the kernel's
            break
        key, _, value = tok.partition("=")
        if key == "default_hugepagesz":
            default = cmdline_kb(value) or default
        elif key == "hugepagesz":
            size_kb = cmdline_kb(value)
        elif key == "hugepages":
            pages = sum(int(p.split(":")[-1]) for p in value.split(",") if p.split(":")[-1]
                        .isdigit())
            out.append((KnobId.pool(size_kb or default), str(pages)))
            size_kb = None
        elif t := next((t for t in DECLARED_THP.values() if t.cmdline == key
                        and t.takes_cmdline(sizes.kernel if sizes else None)), None):
            out.append((KnobId.thp(t.file), value))  # thp_knobs.py: its parameter
        params.append((key, value))
    return out + list(sizes.from_cmdline(params) if sizes else ())


class NextBoot(NamedTuple):
    cmdline: str | None
    source: str | None  # where the command line comes from
    release: str | None  # the kernel's release, from its image's name (None: not found)
    notes: tuple[str, ...]


def _release(sr: SysRoot, image: str) -> str | None:
    """A kernel's release from its image's name (vmlinuz-6.1.0-18-amd64), or from the name a
    link such as /vmlinuz points to."""
    for name in (image, sr.readlink(image) or ""):
        mt = re.search(r"(?:vmlinu[xz]|[Ii]mage)-(\d+\.\d+[^/\s]*)$", name)
        if mt:
            return mt.group(1)
    return None


def next_boot(sr: SysRoot, sizes: SizesAtBoot) -> NextBoot:
    cmdline = source = release = None
    notes: list[str] = []
    for cfg in ("/boot/grub/grub.cfg", "/boot/grub2/grub.cfg"):
        text = sr.read(cfg, quiet_missing=True)
        if text:  # the first `linux` line: the default entry unless GRUB_DEFAULT says else
            mt = re.search(r"^[ \t]*linux(?:efi|16)?[ \t]+(\S+)(?:[ \t]+(.*))?$", text, re.M)
            if mt:
                cmdline, source = (mt.group(2) or "").strip(), f"{cfg} (first entry)"
                release = _release(sr, mt.group(1))
                break
    entries = sorted((n for n in sr.listdir("/boot/loader/entries") if n.endswith(".conf")),
                     key=_version_order)
    if cmdline is None and entries:
        last = entries[-1]  # sd-boot and grubby default to the newest entry
        for line in (sr.read(f"/boot/loader/entries/{last}") or "").splitlines():
            key, _, value = line.strip().partition(" ")
            if key == "options":
                cmdline, source = value.strip(), f"/boot/loader/entries/{last}"
            elif key == "version" or (key == "linux" and release is None):
                release = value.strip() if key == "version" else _release(sr, value.strip())
    if cmdline is None:
        text = sr.read("/etc/kernel/cmdline", quiet_missing=True)
        if text:
            cmdline, source = text.strip(), "/etc/kernel/cmdline"
    grub, files = grub_default(sr)
    if grub is not None:
        if cmdline is None:
            cmdline, source = grub, " + ".join(files)
        else:
            want = dict(cmdline_knobs(grub, None, sizes))
            have = dict(cmdline_knobs(cmdline, None, sizes))
            if want != have:
                notes.append(f"{' + '.join(files)} asks for {_fmt(want) or 'nothing'} but "
                             f"{source} boots with {_fmt(have) or 'nothing'}: run update-grub "
                             "for it to take effect")
    return NextBoot(cmdline, source, release, tuple(notes))


def _version_order(name: str) -> list:
    """A BLS entry's name in version order (6.10 after 6.9), as sd-boot sorts them."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name)]


def _fmt(knobs: dict[KnobId, str]) -> str:
    return ", ".join(f"{k.key}={v}" for k, v in sorted(knobs.items(), key=lambda kv: kv[0].key))
