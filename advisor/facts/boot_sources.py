"""The files a boot is configured by, read as their own tools read them: GRUB's defaults
(grub-mkconfig sources /etc/default/grub, then /etc/default/grub.d/*.cfg), TuneD's profile
files (tuned.py merges them) and a kernel's build configuration. What
each of them sets is decided in boot.py."""

from __future__ import annotations

import re
import shlex

from .sysroot import SysRoot

def grub_default(sr: SysRoot) -> tuple[str | None, list[str]]:
    """GRUB_CMDLINE_LINUX and _DEFAULT from /etc/default/grub and /etc/default/grub.d/*.cfg
    (sourced after it, grub-mkconfig), with `$VAR` references to themselves expanded."""
    files = ["/etc/default/grub"] + [f"/etc/default/grub.d/{n}" for n in
                                     sr.listdir("/etc/default/grub.d") if n.endswith(".cfg")]
    env: dict[str, str] = {}
    seen = []
    for f in files:
        text = sr.read(f, quiet_missing=True)
        if text is None:
            continue
        seen.append(f)
        for line in text.splitlines():
            mt = re.match(r"\s*(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)=(.*)$", line)
            if not mt:
                continue
            try:
                words = shlex.split(mt.group(2), comments=True)
            except ValueError:
                continue
            value = " ".join(words)
            value = re.sub(r"\$\{?(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)\}?",
                           lambda m: env.get(m.group(1), ""), value)
            env[mt.group(1)] = value.strip()
    if not seen:
        return None, []
    return " ".join(x for x in (env.get("GRUB_CMDLINE_LINUX"),
                                env.get("GRUB_CMDLINE_LINUX_DEFAULT")) if x), seen


def ini(text: str) -> dict[str, dict[str, tuple[str, int]]]:
    """tuned.conf sections -> {key: (value, line)}, as TuneD's ConfigParser reads them
    (delimiters `=`, inline_comment_prefixes `#`, strict=False, keys as written): whole-line
    comments start with `#` or `;`, an inline one with whitespace and `#`, an indented line
    continues the value above it, a later key or section of the same name adds to or
    overrides the earlier, and quotes are kept (Python's configparser documentation)."""
    out: dict[str, dict[str, tuple[str, int]]] = {}
    sec = key = None
    for n, line in enumerate(text.splitlines(), 1):
        s = re.split(r"\s#", line, 1)[0].strip()
        if not s or s[0] in "#;":
            continue
        if line[:1] in " \t" and sec is not None and key is not None:
            v, at = out[sec][key]
            out[sec][key] = ((v + "\n" + s).strip(), at)
        elif s.startswith("[") and s.endswith("]"):
            sec, key = s[1:-1].strip(), None
            out.setdefault(sec, {})
        elif "=" in s and sec is not None:
            k, _, v = s.partition("=")
            key = k.strip()
            out[sec][key] = (v.strip(), n)
    return out


def kernel_config(sr: SysRoot, release: str | None = None) -> str | None:
    """A kernel's build configuration, the running one's by default: /boot/config-<release>,
    or /proc/config.gz for the running kernel."""
    running = (sr.read("/proc/sys/kernel/osrelease", quiet_missing=True) or "").strip()
    release = release or running
    text = sr.read(f"/boot/config-{release}", quiet_missing=True) if release else None
    if text is None and release == running:
        data = sr.read_bytes("/proc/config.gz", quiet_missing=True)
        if data:
            import gzip
            try:
                text = gzip.decompress(data).decode("utf-8", "replace")
            except (OSError, EOFError):
                text = None
    return text
