"""A JVM's options as HotSpot reads them: the flags that decide its large pages, from its
command line, @argfiles and launcher environment (or jcmd), the regions it reserves, and what
`java -XX:+PrintFlagsFinal` says of a planned set of flags."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field

from hpadvise.procs import Proc
from hpadvise.sysroot import SysRoot

DOCS = "OpenJDK, java command: -XX:+UseLargePages / -XX:+UseTransparentHugePages"
MiB = 1 << 20

# Main classes of JVM databases and brokers people look for by name.
KNOWN = {
    "org.apache.cassandra.service.CassandraDaemon": "Cassandra",
    "org.elasticsearch.bootstrap.Elasticsearch": "Elasticsearch",
    "org.opensearch.bootstrap.OpenSearch": "OpenSearch",
    "kafka.Kafka": "Kafka",
    "org.apache.zookeeper.server.quorum.QuorumPeerMain": "ZooKeeper",
    "org.neo4j.server.CommunityEntryPoint": "Neo4j",
    "org.apache.solr.util.SolrCLI": "Solr",
}

_SIZE = re.compile(r"(\d+)([kKmMgGtT]?)")


def parse_jsize(text: str) -> int | None:
    """-Xmx4g, -XX:MaxHeapSize=4294967296: a number with an optional k/m/g/t suffix (1024s)."""
    mt = _SIZE.fullmatch(text.strip())
    if not mt:
        return None
    return int(mt.group(1)) << (10 * " kmgt".index(mt.group(2).lower() or " "))


@dataclass
class JvmFlags:
    xmx: int | None = None
    xms: int | None = None
    large_pages: bool | None = None
    thp: bool | None = None
    large_page_size: int | None = None
    code_cache: int | None = None
    tiered: bool = True
    gc: str = "G1"
    pretouch: bool = False
    main: str | None = None
    contradictions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _seen: dict[str, set[bool]] = field(default_factory=dict, repr=False)
    last: dict[str, bool] = field(default_factory=dict)  # -XX:+/-Name: the value that won

    def _bool(self, name: str, on: bool) -> None:
        self.last[name] = on
        self._seen.setdefault(name, set()).add(on)
        if len(self._seen[name]) == 2 and name not in self.contradictions:
            self.contradictions.append(name)

    def apply(self, arg: str) -> None:
        """One JVM option; later calls override earlier ones, as in HotSpot's Arguments."""
        if arg.startswith("-Xmx"):
            self.xmx = parse_jsize(arg[4:]) or self.xmx
        elif arg.startswith("-Xms"):
            self.xms = parse_jsize(arg[4:]) or self.xms
        elif arg.startswith("-XX:"):
            body = arg[4:]
            if body[:1] in "+-":
                on, name = body[0] == "+", body[1:]
                self._bool(name, on)
                if name == "UseLargePages":
                    self.large_pages = on
                elif name == "UseTransparentHugePages":
                    self.thp = on
                elif name == "TieredCompilation":
                    self.tiered = on
                elif name == "AlwaysPreTouch":
                    self.pretouch = on
                elif name in ("UseG1GC", "UseParallelGC", "UseSerialGC", "UseZGC",
                              "UseShenandoahGC") and on:
                    self.gc = name[3:-2]
            else:
                name, _, value = body.partition("=")
                size = parse_jsize(value)
                if name == "MaxHeapSize" and size:
                    self.xmx = size
                elif name in ("InitialHeapSize", "MinHeapSize") and size:
                    self.xms = size
                elif name == "LargePageSizeInBytes" and size:
                    self.large_page_size = size
                elif name == "ReservedCodeCacheSize" and size:
                    self.code_cache = size


def expand_argfiles(sr: SysRoot, argv: tuple[str, ...], cwd: str | None,
                    notes: list[str]) -> list[str]:
    """The java launcher expands @file arguments (JDK >= 9): whitespace-separated options,
    quotes and # comments allowed."""
    out: list[str] = []
    for a in argv:
        if a.startswith("@") and len(a) > 1 and not a.startswith("@@"):
            path = a[1:] if os.path.isabs(a[1:]) or not cwd else os.path.join(cwd, a[1:])
            text = sr.read(path, quiet_missing=True)
            if text is None:
                notes.append(f"argument file {path} unreadable: its options are not known")
                continue
            try:
                out += shlex.split(text, comments=True)
            except ValueError:
                notes.append(f"argument file {path} could not be parsed")
        else:
            out.append(a)
    return out


def read_flags(sr: SysRoot, p: Proc, cwd: str | None) -> JvmFlags:
    f = JvmFlags()
    env = p.environ()
    if env is None:
        f.notes.append("environment unreadable (run as root or as the JVM's user): "
                       "JAVA_TOOL_OPTIONS / JDK_JAVA_OPTIONS not known")
        env = {}
    args = expand_argfiles(sr, p.cmdline[1:], cwd, f.notes)
    for src in (env.get("JAVA_TOOL_OPTIONS", ""), env.get("JDK_JAVA_OPTIONS", "")):
        for a in src.split():
            f.apply(a)
    main = None
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-cp", "-classpath", "--class-path", "--module-path", "-p", "--add-opens",
                 "--add-exports", "--add-modules"):
            skip = True
            continue
        if a == "-jar" or a in ("-m", "--module"):
            main = "jar"
            continue
        if main == "jar":
            main = a
            break
        if a.startswith("-"):
            f.apply(a)
            continue
        main = a  # the first non-option is the main class; the rest are its arguments
        break
    f.main = main
    return f


def jcmd_flags(pid: int, owner: str | None, timeout: float = 5) -> str | None:
    """`jcmd PID VM.flags`: the JVM's final flags (ergonomics included). It must run as the
    JVM's user (the attach socket checks the uid)."""
    import shutil
    jcmd = shutil.which("jcmd")
    if not jcmd:
        return None
    cmd = [jcmd, str(pid), "VM.flags"]
    if os.geteuid() == 0 and owner and owner != "root":
        cmd = ["runuser", "-u", owner, "--"] + cmd
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd="/")
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 and "-XX:" in r.stdout else None


def java_major(sr: SysRoot, p: Proc) -> int | None:
    """The release from the JDK's `release` file next to bin/java (JAVA_VERSION="17.0.15")."""
    exe = sr.readlink(f"/proc/{p.pid}/exe")
    if not exe:
        return None
    home = os.path.dirname(os.path.dirname(exe.replace(" (deleted)", "")))
    text = sr.read(f"{home}/release", quiet_missing=True) or ""
    mt = re.search(r'JAVA_VERSION="(\d+)(?:\.(\d+))?', text)
    if not mt:
        return None
    major = int(mt.group(1))
    return int(mt.group(2)) if major == 1 and mt.group(2) else major


def reservations(f: JvmFlags, heap: int, major: int | None, page: int,
                 heap_on_large: bool) -> list[tuple[str, int]]:
    """What -XX:+UseLargePages puts on pages of `page` bytes: (what, bytes) per reservation."""
    code = f.code_cache or (240 * MiB if f.tiered else 48 * MiB)
    out = [("code cache", code)]
    if heap_on_large:
        out.insert(0, ("heap", heap))
    if f.gc == "G1":
        side = heap // 512
        out += [("block offset table", side), ("card table", side), ("card counts table", side)]
        bitmaps = 1 if (major or 17) >= 20 else 2
        out += [(f"mark bitmap {i + 1}", heap // 64) for i in range(bitmaps)]
    elif f.gc == "Parallel":
        out.append(("mark bitmap", heap // 32))
    return [(w, b) for w, b in out if b >= page or w in ("heap", "code cache")]


# Flags left out of the probe: it must not commit or touch a heap, nor map huge pages.
_PROBE_SKIP = re.compile(r"-Xms|-XX:(InitialHeapSize|MinHeapSize)=|-XX:[+-](AlwaysPreTouch|"
                         r"UseLargePages|UseTransparentHugePages)$")


def probe(flags: list[str]) -> tuple[dict[str, str], int | None]:
    """What this host's JVM makes of `flags`: `java FLAGS -XX:+PrintFlagsFinal -version`
    prints every flag's final value (ergonomics applied) and the version, and rejects options it
    does not know. Flags that would commit, touch or large-page a heap are left out of the
    probe (they are applied from the command line as given)."""
    import shutil
    import subprocess

    from hpadvise.errors import InputError
    java = shutil.which("java")
    if java is None:
        raise InputError("no java found: install a JDK (Debian: default-jdk-headless) so that "
                         "the JVM can check the flags itself")
    cmd = [java, *[f for f in flags if not _PROBE_SKIP.match(f)], "-XX:+PrintFlagsFinal",
           "-version"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"java could not be run: {exc}") from None
    if r.returncode != 0:
        first = next((ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()), "")
        raise InputError(f"the JVM refuses these flags: {first.strip()}")
    values = {}
    for line in r.stdout.splitlines():
        mt = re.match(r"\s*\S+\s+(\w+)\s+:?=\s+(\S+)", line)
        if mt:
            values[mt.group(1)] = mt.group(2)
    mt = re.search(r'version "(\d+)(?:\.(\d+))?', r.stderr)
    major = None
    if mt:
        major = int(mt.group(2)) if mt.group(1) == "1" and mt.group(2) else int(mt.group(1))
    return values, major
