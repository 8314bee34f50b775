"""A JVM's options as HotSpot reads them: the flags that decide its large pages, from its
command line, @argfiles and launcher environment (or jcmd), the regions it reserves, and what
`java -XX:+PrintFlagsFinal` says of a planned set of flags."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field

from hpadvise.api.face import Proc, SysRoot, exe_of

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
    stack: int | None = None  # -Xss / -XX:ThreadStackSize, bytes (None: the JDK's default)
    main: str | None = None
    contradictions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _seen: dict[str, set[bool]] = field(default_factory=dict, repr=False)
    last: dict[str, bool] = field(default_factory=dict)  # -XX:+/-Name: the value that won
    # where each option's winning value came from: "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS",
    # "the command line", "@FILE" (an argument file), "_JAVA_OPTIONS", "jcmd" (the running
    # JVM's word)
    sources: dict[str, str] = field(default_factory=dict)
    source: str = "the command line"  # where the options apply() gets now come from

    def _bool(self, name: str, on: bool) -> None:
        self.last[name] = on
        self._seen.setdefault(name, set()).add(on)
        if len(self._seen[name]) == 2 and name not in self.contradictions:
            self.contradictions.append(name)

    def apply(self, arg: str) -> None:
        """One JVM option; later calls override earlier ones, as in HotSpot's Arguments."""
        key = arg[4:].lstrip("+-").split("=", 1)[0] if arg.startswith("-XX:") else arg[:4]
        self.sources[key] = self.source
        if arg.startswith("-Xmx"):
            self.xmx = parse_jsize(arg[4:]) or self.xmx
        elif arg.startswith("-Xms"):
            self.xms = parse_jsize(arg[4:]) or self.xms
        elif arg.startswith("-Xss"):
            self.stack = parse_jsize(arg[4:]) or self.stack
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
                elif name == "ThreadStackSize" and value.isdigit():
                    self.stack = int(value) * 1024  # an intx in K (globals_linux_x86.hpp)


def expand_argfiles(sr: SysRoot, argv: tuple[str, ...], cwd: str | None,
                    notes: list[str], origins: list[str] | None = None) -> list[str]:
    """The java launcher expands @file arguments (JDK >= 9): whitespace-separated options,
    quotes and # comments allowed. `origins`, when given, gets where each argument came
    from ("the command line" or "@FILE")."""
    out: list[str] = []
    for a in argv:
        if a.startswith("@") and len(a) > 1 and not a.startswith("@@"):
            path = a[1:] if os.path.isabs(a[1:]) or not cwd else os.path.join(cwd, a[1:])
            text = sr.read(path, quiet_missing=True)
            if text is None:
                notes.append(f"argument file {path} unreadable: its options are not known")
                continue
            try:
                got = shlex.split(text, comments=True)
            except ValueError:
                notes.append(f"argument file {path} could not be parsed")
                continue
            out += got
            if origins is not None:
                origins += [f"@{path}"] * len(got)
        else:
            out.append(a)
            if origins is not None:
                origins.append("the command line")
    return out


def read_flags(sr: SysRoot, p: Proc, cwd: str | None) -> JvmFlags:
    f = JvmFlags()
    env = p.environ()
    if env is None:
        f.notes.append("environment unreadable (run as root or as the JVM's user): "
                       "JAVA_TOOL_OPTIONS / JDK_JAVA_OPTIONS / _JAVA_OPTIONS not known")
        env = {}
    origins: list[str] = []
    args = expand_argfiles(sr, p.cmdline[1:], cwd, f.notes, origins)
    for name in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"):  # lowest first
        f.source = name
        for a in env.get(name, "").split():
            f.apply(a)
    main = None
    skip = False
    for a, f.source in zip(args, origins):
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
    # HotSpot parses _JAVA_OPTIONS after the command line (arguments.cpp,
    # Arguments::parse_vm_init_args): its flags win over the command line's
    f.source = "_JAVA_OPTIONS"
    for a in env.get("_JAVA_OPTIONS", "").split():
        f.apply(a)
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


def java_major(sr: SysRoot, p: Proc, fs: SysRoot | None = None) -> int | None:
    """The release from the JDK's `release` file next to bin/java (JAVA_VERSION="17.0.15"),
    read in the JVM's own root (`fs`, roots.view) where it has one."""
    exe = exe_of(sr, p.pid)  # in its own root, where it has one
    if not exe:
        return None
    home = os.path.dirname(os.path.dirname(exe))
    text = (fs or sr).read(f"{home}/release", quiet_missing=True) or ""
    mt = re.search(r'JAVA_VERSION="(\d+)(?:\.(\d+))?', text)
    if not mt:
        return None
    major = int(mt.group(1))
    return int(mt.group(2)) if major == 1 and mt.group(2) else major


def java_home(exe: str | None) -> str | None:
    """The JDK's home directory from its java binary (…/bin/java), links resolved."""
    if not exe:
        return None
    return os.path.dirname(os.path.dirname(os.path.realpath(exe.replace(" (deleted)", ""))))


def reservations(f: JvmFlags, heap: int, major: int | None, page: int,
                 heap_on_large: bool) -> list[tuple[str, int]]:
    """What -XX:+UseLargePages reserves, (what, bytes), with everything on pages of `page`
    bytes (G1's side tables follow the heap: heap/512 each, mark bitmaps heap/64)."""
    return [(w, b) for w, b, _ in layout(f, heap, major, page // 1024, (page // 1024,),
                                         heap_on_large) if b]


def _page(nbytes: int, sizes_kb: tuple[int, ...], large_kb: int, aligned: bool,
          min_pages: int = 1) -> int | None:
    """The page size HotSpot gives a region (os::page_size_for_region_aligned / _unaligned):
    the largest usable size up to the large page size that the region holds min_pages of
    (whole pages when aligned); None: 4 KiB pages."""
    for kb in sorted((k for k in sizes_kb if k <= large_kb), reverse=True):
        b = kb * 1024
        if nbytes >= b * min_pages and (not aligned or nbytes % b == 0):
            return kb
    return None


def sysv_large_pages(f: JvmFlags, major: int | None) -> bool:
    """Whether the JVM puts its large pages in SysV shared memory (shmget SHM_HUGETLB): JDK 21
    and older with -XX:+UseSHM, which turns large pages on by itself, unless -XX:-UseLargePages,
    THP or -XX:+UseHugeTLBFS (tried first) takes them (os_linux.cpp large_page_init,
    setup_large_page_type); JDK 22 made the flag obsolete (JDK-8261894)."""
    return bool(f.last.get("UseSHM") and f.large_pages is not False and not f.thp
                and not f.last.get("UseHugeTLBFS") and major is not None and major < 22)


def layout(f: JvmFlags, heap: int, major: int | None, large_kb: int,
           sizes_kb: tuple[int, ...], heap_on_large: bool = True) -> list[tuple[str, int, int | None]]:
    """Each region -XX:+UseLargePages reserves as (what, bytes, page size in kB or None for
    4 KiB pages), as the JDK `major` places it with large pages of large_kb available among
    sizes_kb. Measured with -Xlog:pagesize on Temurin 11.0.13, Debian's 17.0.15, Temurin
    21.0.8 and 25.0.2, both pools present:
    - JDK 17 and later pick a page size per region (JDK-8256155): the heap takes the large
      page size (LargePageSizeInBytes) when it holds one, and is rounded up to whole pages of
      it (-Xmx1536m became a 2 GiB heap on 1 GiB pages); the code cache and G1's side tables
      take the largest size they are a whole multiple of (2 MiB beside a 1 GiB heap).
    - JDK 11 uses the default huge page size for everything: with LargePageSizeInBytes=1g it
      warns "Setting LargePageSizeInBytes has no effect on this OS. Large page size is 2048K."
      and took 651 x 2 MiB for a 1 GiB G1 heap, as without it (its -Xlog:pagesize reports the
      code heaps at 4K, yet they are reserved on 2 MiB pages: 120 of the 651).
    - G1: block offset table and card table of heap/512 each, a card counts table of
      heap/512 up to JDK 17 (not in 21 or 25), mark bitmaps of heap/64: two up to JDK 19, one
      from JDK 20 (JDK-8210708). Parallel: a mark bitmap of heap/32 (its card table, heap/512
      + 1 byte, is no page multiple)."""
    modern = (major or 17) >= 17
    if f.gc == "Z":
        return _zgc(f, heap, sizes_kb, heap_on_large)
    if not modern:
        default = min(sizes_kb) if sizes_kb else 2048
        large_kb = 2048 if 2048 in sizes_kb else default
    out: list[tuple[str, int, int | None]] = []
    hp = _page(heap, sizes_kb, large_kb, aligned=False) if heap_on_large else None
    h = -(-heap // (hp * 1024)) * hp * 1024 if hp and modern else heap
    if heap_on_large:
        out.append(("heap", h, hp))
    code = f.code_cache or (240 * MiB if f.tiered else 48 * MiB)
    # CodeCache::page_size: at least 8 pages of the size it takes (codeCache.cpp); with
    # -XX:+UseSHM (JDK 21 and older) none: os_linux.cpp can_execute_large_page_memory() is
    # UseTransparentHugePages || UseHugeTLBFS (measured on 17.0.15: CodeHeap page_size=4K)
    out.append(("code cache", code, None if sysv_large_pages(f, major)
                else _page(code, sizes_kb, large_kb, True, 8)))
    side: list[tuple[str, int]] = []
    if f.gc == "G1":
        side = [("block offset table", h // 512), ("card table", h // 512)]
        if (major or 17) < 21:
            side.append(("card counts table", h // 512))
        bitmaps = 1 if (major or 17) >= 20 else 2
        side += [(f"mark bitmap {i + 1}" if bitmaps > 1 else "mark bitmap", h // 64)
                 for i in range(bitmaps)]
    elif f.gc == "Parallel":
        side.append(("mark bitmap", h // 32))
    out += [(w, b, _page(b, sizes_kb, large_kb, True)) for w, b in side]
    return out


def _zgc(f: JvmFlags, heap: int, sizes_kb: tuple[int, ...],
         heap_on_large: bool) -> list[tuple[str, int, int | None]]:
    """ZGC: the heap on 2 MiB pages only, in a hugetlb memfd ("memfd:java_heap.hugetlb"),
    rounded up to its 2 MiB granules; with another LargePageSizeInBytes the JVM refuses to
    start ("Incompatible -XX:LargePageSizeInBytes, only 2M large pages are supported by ZGC");
    its tables are not on large pages; the code cache as with the other collectors. Measured
    with -Xmx1g on JDK 11 (experimental), 17, 21 (with and without -XX:+ZGenerational) and 25:
    632 pages of 2 MiB each (512 heap + 120 code cache); before generational ZGC the heap is
    mapped three times (3 GiB of views on the same 512 pages). It commits -Xms at the start
    and takes pages as the heap grows to -Xmx (-Xms256m: 128 heap pages at the start)."""
    out: list[tuple[str, int, int | None]] = []
    if heap_on_large:
        hp = 2048 if 2048 in sizes_kb else None
        out.append(("heap", -(-heap // (2 * MiB)) * 2 * MiB, hp))
    code = f.code_cache or (240 * MiB if f.tiered else 48 * MiB)
    out.append(("code cache", code, _page(code, sizes_kb, 2048, True, 8)))
    return out


def split(regions: list[tuple[str, int, int | None]]) -> dict[int, int]:
    """Pages of each size the regions take at once (4 KiB regions left out)."""
    out: dict[int, int] = {}
    for _, b, kb in regions:
        if kb:
            out[kb] = out.get(kb, 0) + -(-b // (kb * 1024))
    return out


# Flags left out of the probe: it must not commit or touch a heap, nor map huge pages.
_PROBE_SKIP = re.compile(r"-Xms|-XX:(InitialHeapSize|MinHeapSize)=|-XX:[+-](AlwaysPreTouch|"
                         r"UseLargePages|UseTransparentHugePages)$")


def probe(flags: list[str], java: str | None = None) -> tuple[dict[str, str], int | None]:
    """What this host's JVM makes of `flags`: `java FLAGS -XX:+PrintFlagsFinal -version`
    prints every flag's final value (ergonomics applied) and the version, and rejects options it
    does not know. Flags that would commit, touch or large-page a heap are left out of the
    probe (they are applied from the command line as given)."""
    import shutil
    import subprocess

    from hpadvise.api.face import InputError
    if java is not None:
        if not (os.path.isfile(java) and os.access(java, os.X_OK)):
            raise InputError(f"--java {java}: not an executable file; give the JDK's bin/java")
    else:
        java = shutil.which("java")
    if java is None:
        raise InputError("no java found: install a JDK (Debian: default-jdk-headless) or "
                         "give one with --java PATH, so that the JVM can check the flags itself")
    cmd = [java, *[f for f in flags if not _PROBE_SKIP.match(f)], "-XX:+PrintFlagsFinal",
           "-version"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"java could not be run: {exc}") from None
    if r.returncode != 0:
        said = [ln.strip() for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
        # "Error occurred during initialization of VM" comes first; the reason follows it
        why = next((ln for ln in said if not ln.startswith("Error occurred")), said[0] if said
                   else f"exit {r.returncode}")
        raise InputError(f"the JVM refuses these flags: {why}")
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
