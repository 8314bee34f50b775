"""JVMs (and the databases that run on one: Cassandra, Elasticsearch/OpenSearch, Kafka):
read their flags, count the pages -XX:+UseLargePages reserves, and check what smaps says.

Facts this module relies on (HotSpot, OpenJDK 17; measured here with -Xlog:pagesize, see
docs/reference.md):
- With -XX:+UseLargePages (explicit huge pages, UseHugeTLBFS) each of these reservations is
  mapped on huge pages, rounded up to the page size: the Java heap (-Xmx), the code cache
  (-XX:ReservedCodeCacheSize: 240M with tiered compilation, 48M without; segmented into three
  code heaps), and GC side tables. G1: block offset table, card table and card counts table
  of heap/512 each, and mark bitmaps of heap/64 (two in JDK 17: prev and next; one from JDK 20,
  JDK-8210708). Parallel: a mark bitmap of heap/32 (its card table, heap/512 + 1 byte, is not a
  page multiple and stays on 4 KiB pages). Serial: the heap only.
  Measured: -Xmx1g -Xms1g G1 = 1024 + 240 + 3 x 2 + 2 x 16 MiB = 651 x 2 MiB pages.
- G1 keeps the heap on 4 KiB pages when -Xms < -Xmx (it commits the heap piecemeal; measured:
  "Heap: ... page_size=4K"): static huge pages for G1 need -Xms = -Xmx.
- No pages: "UseLargePages disabled, no large pages configured and available on the system";
  too few: "Failed to reserve and commit memory ... (errno = 12)"; the JVM carries on either
  way, so smaps is the evidence.
- -XX:+UseTransparentHugePages madvise()s the heap: needs THP enabled = madvise or always.
- Option sources, lowest precedence first: JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS (java launcher,
  JDK >= 9), the command line with @argfiles expanded; for -XX flags the last one wins
  (JDK docs, "java" command, "Using the JDK_JAVA_OPTIONS Launcher Environment Variable").
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field

from hpadvise.engines import Change, Demand, Engine, Finding, Instance, Targets
from hpadvise.findings import TRANSHUGE, Code, Codes
from hpadvise.host import HostFacts
from hpadvise.procs import Proc, ProcTable, backing_of
from hpadvise.profiles import Profile
from hpadvise.sizing import fmt_bytes, fmt_page, pages_for
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


@dataclass
class Jvm:
    pid: int
    owner: str | None
    flags: JvmFlags
    major: int | None
    app: str | None
    heap: int
    heap_source: str
    # What smaps shows (None when unreadable).
    hugetlb_kb: int | None = None
    anon_huge_kb: int | None = None
    observe_note: str | None = None


CODES = Codes(
    Code("jvm.vanished", "info", "JVM could not be inspected"),
    Code("jvm.flags.partial", "info", "Some JVM options could not be read", DOCS),
    Code("jvm.flags.contradictory", "warn", "A flag is given both on and off", DOCS),
    Code("jvm.heap.larger_than_ram", "warn", "-Xmx exceeds RAM", DOCS),
    Code("jvm.large_pages.heap_small_pages", "warn",
         "G1 keeps the heap on 4 KiB pages: -Xms is below -Xmx", DOCS),
    Code("jvm.large_pages.fallback", "crit", "-XX:+UseLargePages fell back to normal pages", DOCS),
    Code("jvm.large_pages.active", "ok", "Heap and code cache on huge pages", DOCS),
    Code("jvm.thp.never", "warn", "-XX:+UseTransparentHugePages but THP is never", TRANSHUGE),
    Code("jvm.thp.none", "warn", "-XX:+UseTransparentHugePages, but no THP in use", DOCS),
    Code("jvm.thp.active", "ok", "The heap is on THP", DOCS),
    Code("jvm.huge_pages.none", "info",
         "Neither -XX:+UseLargePages nor -XX:+UseTransparentHugePages", DOCS),
    Code("jvm.demand.estimate", "info", "Page count is an estimate", DOCS),
)


class JvmEngine(Engine):
    """Java processes: static huge pages with -XX:+UseLargePages, or THP with
    -XX:+UseTransparentHugePages, by profile. A running JVM's flags cannot be changed: apply
    sets the host side and prints the flags to add and where."""

    name = "jvm"
    description = "JVMs (Cassandra, Elasticsearch/OpenSearch, Kafka...): heap, code cache, GC tables"
    process_names = ("java",)
    codes = CODES
    # mode: static = -XX:+UseLargePages on a reserved pool; thp = -XX:+UseTransparentHugePages
    # (THP enabled=madvise); auto = static from static_min_heap up, THP below.
    profile_schema = {"mode": (str, ("static", "thp", "auto"), "auto"),
                      "static_min_heap": (str, None, "4GiB")}

    def discover(self, host: HostFacts, procs: ProcTable, targets: Targets) -> list[Instance]:
        out = []
        for p in procs.by_name(*self.process_names):
            argv = p.cmdline
            if not argv:  # exited while we looked
                continue
            try:
                out.append(self._instance(procs, p, host))
            except (OSError, ValueError, AttributeError) as exc:
                inst = Instance(self.name, f"jvm:{p.pid}", f"java (pid {p.pid})", True,
                                pid=p.pid)
                inst.findings.append(CODES["jvm.vanished"](
                    "It may have exited while hpadvise read it.", str(exc)[:200], inst.id))
                out.append(inst)
        return out

    def _instance(self, procs: ProcTable, p: Proc, host: HostFacts) -> Instance:
        sr = procs.sr
        cwd = sr.readlink(f"/proc/{p.pid}/cwd")
        f = read_flags(sr, p, cwd)
        owner = procs.user(p.uid)
        if f.xmx is None and sr.live:
            out = jcmd_flags(p.pid, owner)
            if out:
                for tok in out.split():
                    if tok.startswith("-XX:"):
                        f.apply(tok)
        mem_total = (host.mem.total_kb or 0) * 1024
        heap, src = (f.xmx, "-Xmx") if f.xmx else \
            (mem_total // 4, "default: 25% of RAM (MaxRAMPercentage)")
        major = java_major(sr, p)
        app = KNOWN.get(f.main or "")
        label = f"{app or 'java'} (pid {p.pid}, main {f.main or '?'})"
        j = Jvm(p.pid, owner, f, major, app, heap, src)
        settings = {"heap_max": fmt_bytes(heap), "heap_min": fmt_bytes(f.xms) if f.xms else None,
                    "gc": f.gc, "UseLargePages": f.large_pages,
                    "UseTransparentHugePages": f.thp, "main": f.main}
        inst = Instance(self.name, f"jvm:{p.pid}", label, True, pid=p.pid, owner=owner,
                        version=str(major) if major else None,
                        settings={k: v for k, v in settings.items() if v is not None},
                        state=j)
        maps = p.smaps
        if maps is None:
            j.observe_note = f"smaps unreadable: run as root or as {owner}"
        else:
            b = backing_of(maps, host.thp.pmd_size_kb, host.base_page_bytes // 1024)
            inst.backing, inst.backing_page_kb = b.kind, b.page_kb
            j.hugetlb_kb = b.hugetlb_kb
            j.anon_huge_kb = sum(m.anon_huge_kb for m in maps)
        inst.page_tables_kb = p.vm_pte_kb
        self._size(inst, j, host)
        return inst

    def wants_static(self, j: Jvm, profile: Profile) -> bool:
        if j.flags.large_pages:
            return True
        if j.flags.thp:
            return False
        cfg = profile.engine(self.name)
        mode = cfg.get("mode", "auto")
        if mode == "auto":
            from hpadvise.sizing import parse_bytes
            return j.heap >= parse_bytes(cfg.get("static_min_heap", "4GiB"))
        return mode == "static"

    def _size(self, inst: Instance, j: Jvm, host: HostFacts) -> None:
        f = j.flags
        page_kb = (f.large_page_size // 1024) if f.large_page_size and \
            f.large_page_size // 1024 in host.page_sizes_kb else (host.default_hugepage_kb or 2048)
        sizes = sorted(set(host.page_sizes_kb) | {page_kb})
        # What the pool must hold with the flags hpadvise recommends (-Xms = -Xmx for G1).
        pages = {kb_: sum(pages_for(b, kb_ * 1024) for _, b in
                          reservations(f, j.heap, j.major, kb_ * 1024, True)) for kb_ in sizes}
        held = pages_for(j.hugetlb_kb or 0, page_kb)
        parts = ", ".join(f"{w} {fmt_bytes(b)}" for w, b in
                          reservations(f, j.heap, j.major, page_kb * 1024, True))
        exact = f.gc in ("G1", "Parallel", "Serial") and f.xmx is not None
        inst.demand = Demand(inst.id, None, page_kb, pages, exact,
                             f"-XX:+UseLargePages reservations (JDK {j.major or '?'}, {f.gc}): "
                             f"{parts}", selectable=False, held_pages=held)

    def what_if(self, args: list[str], host: HostFacts, version: str | None) -> Instance:
        """A planned JVM (`hpadvise size jvm -- FLAGS`): the flags as this host's JVM resolves
        them (probe), sized like a running one with -XX:+UseLargePages."""
        from hpadvise.errors import InputError
        bad = [a for a in args if not a.startswith("-")]
        if bad:
            raise InputError(f"{bad[0]!r}: give JVM flags (after --), e.g. "
                             "hpadvise size jvm -- -Xmx16g -XX:+UseLargePages")
        values, major = probe(args)
        if version and major and str(major) != version:
            raise InputError(f"--version {version}: the installed JVM is {major}")
        f = JvmFlags()
        for a in args:
            f.apply(a)
        for name in ("UseG1GC", "UseParallelGC", "UseSerialGC", "UseZGC", "UseShenandoahGC"):
            if values.get(name) == "true":
                f.gc = name[3:-2]
        f.tiered = values.get("TieredCompilation", "true") == "true"
        heap = int(values["MaxHeapSize"]) if values.get("MaxHeapSize", "").isdigit() else \
            f.xmx or (host.mem.total_kb or 0) * 1024 // 4
        f.xmx = heap
        if values.get("ReservedCodeCacheSize", "").isdigit():
            f.code_cache = int(values["ReservedCodeCacheSize"])
        j = Jvm(0, None, f, major, KNOWN.get(f.main or ""), heap,
                "-Xmx" if any(a.startswith(("-Xmx", "-XX:MaxHeapSize")) for a in args)
                else "the JVM's default (MaxRAMPercentage of this host)")
        inst = Instance(self.name, "jvm:planned", f"planned JVM {major or ''} "
                        f"({' '.join(args) or 'defaults'})", False,
                        version=str(major) if major else None,
                        settings={"heap_max": fmt_bytes(heap), "gc": f.gc}, state=j)
        self._size(inst, j, host)
        return inst

    def uses_pool(self, inst: Instance, profile: Profile) -> bool:
        j: Jvm | None = inst.state
        return j is not None and self.wants_static(j, profile)

    def thp_needs(self, inst: Instance, profile: Profile) -> dict[str, tuple[set[str], str]]:
        """THP values this instance can live with, per knob, and why."""
        j: Jvm | None = inst.state
        if j is None or self.wants_static(j, profile):
            return {}
        return {"enabled": ({"madvise", "always"},
                            f"{inst.id} uses -XX:+UseTransparentHugePages (madvise on its heap)")}

    def findings(self, inst: Instance, host: HostFacts, profile: Profile) -> list[Finding]:
        f: list[Finding] = []
        j: Jvm | None = inst.state
        if j is None:
            return f
        fl, iid = j.flags, inst.id
        for n in fl.notes:
            f.append(CODES["jvm.flags.partial"](n, "", iid))
        for name in fl.contradictions:
            f.append(CODES["jvm.flags.contradictory"](
                "The JVM takes the last one; the effective value is shown in settings. Remove "
                "the other so that nobody reads it wrong.",
                f"in effect: -XX:{'+' if fl.last[name] else '-'}{name}", iid,
                title=f"-XX:+{name} and -XX:-{name} both given"))
        mem = (host.mem.total_kb or 0) * 1024
        if fl.xmx and mem and fl.xmx > mem:
            f.append(CODES["jvm.heap.larger_than_ram"](
                "The heap can never be backed; with UseLargePages the reservation fails "
                "outright. Lower -Xmx.", f"-Xmx{fl.xmx}", iid,
                title=f"-Xmx {fmt_bytes(fl.xmx)} exceeds RAM ({fmt_bytes(mem)})"))
        hkb = j.hugetlb_kb
        d = inst.demand
        if fl.large_pages:
            want_kb = d.pages.get(d.page_kb, 0) * d.page_kb if d else 0
            g1_small_heap = fl.gc == "G1" and fl.xms is not None and fl.xms < j.heap
            if g1_small_heap:
                f.append(CODES["jvm.large_pages.heap_small_pages"](
                    "With explicit large pages G1 maps the heap on huge pages only when it is "
                    "committed up front. Set -Xms equal to -Xmx.",
                    f"-Xms {fmt_bytes(fl.xms)}, -Xmx {fmt_bytes(j.heap)}", iid))
                want_kb -= pages_for(j.heap, d.page_kb * 1024) * d.page_kb if d else 0
            if hkb is not None and hkb < want_kb:
                f.append(CODES["jvm.large_pages.fallback"](
                    "The JVM could not reserve its huge pages and carried on with 4 KiB pages "
                    "(it warns once on stderr). Size the pool with the count below and restart "
                    "it.", f"smaps: {fmt_bytes(hkb * 1024)} on huge pages of "
                    f"{fmt_bytes(want_kb * 1024)} expected", iid))
            elif hkb:
                f.append(CODES["jvm.large_pages.active"](
                    "Running on huge pages now.", f"smaps: {fmt_bytes(hkb * 1024)} hugetlb", iid,
                    title=f"Heap and code cache on {fmt_page(inst.backing_page_kb)} pages"))
        elif fl.thp:
            if host.thp.enabled.value == "never":
                f.append(CODES["jvm.thp.never"](
                    "The JVM madvise()s its heap for THP; with enabled=never nothing happens. "
                    "Set enabled=madvise.", "transparent_hugepage/enabled = never", iid))
            elif j.anon_huge_kb == 0 and inst.backing is not None:
                f.append(CODES["jvm.thp.none"](
                    "No AnonHugePages in the JVM: memory too fragmented, or defrag too lazy to "
                    "collapse the heap yet.", "smaps: AnonHugePages 0 kB", iid))
            else:
                f.append(CODES["jvm.thp.active"](
                    "Running with transparent huge pages.",
                    f"AnonHugePages {fmt_bytes((j.anon_huge_kb or 0) * 1024)}", iid))
        else:
            static = self.wants_static(j, profile)
            f.append(CODES["jvm.huge_pages.none"](
                "Add -XX:+UseLargePages and -Xms equal to -Xmx; the pool below includes this "
                 "JVM." if static else
                 "Add -XX:+UseTransparentHugePages (with THP enabled=madvise): a heap of this "
                 "size does not warrant a static reservation (profile jvm.static_min_heap).",
                f"heap {fmt_bytes(j.heap)} ({j.heap_source})", iid))
        if d and not d.exact:
            f.append(CODES["jvm.demand.estimate"](
                d.source + ("" if fl.xmx else f"; heap {j.heap_source}"), "", iid))
        return f

    def changes(self, inst: Instance, page_kb: int | None, host: HostFacts,
                profile: Profile) -> list[Change]:
        j: Jvm | None = inst.state
        if j is None:
            return []
        if page_kb is None:  # its cgroup cannot hold the pages: a JVM dies of SIGBUS there
            want = ["-XX:-UseLargePages"] if j.flags.large_pages else []
        else:
            want = self.flags_to_add(j, profile, page_kb, host)
        if not want:
            return []
        return [Change("setting", "java options", "(as started)", " ".join(want),
                       "a running JVM cannot change them: add them where it is started",
                       inst.id, restart=True)]

    def huge_page_settings(self, inst: Instance, page_kb: int, host: HostFacts) -> dict[str, str]:
        j: Jvm | None = inst.state
        if j is None:
            return {}
        f = j.flags
        flags = ["-XX:+UseLargePages", f"-Xms{j.heap // MiB}m", f"-Xmx{j.heap // MiB}m"]
        if page_kb != (host.default_hugepage_kb or 2048):
            flags.append(f"-XX:LargePageSizeInBytes={'1g' if page_kb == 1048576 else f'{page_kb}k'}")
        if f.code_cache:
            flags.append(f"-XX:ReservedCodeCacheSize={f.code_cache // MiB}m")
        return {"java options": " ".join(flags)}

    def flags_to_add(self, j: Jvm, profile: Profile, page_kb: int, host: HostFacts) -> list[str]:
        f = j.flags
        out = []
        if self.wants_static(j, profile):
            if not f.large_pages:
                out.append("-XX:+UseLargePages")
            if f.xms is None or f.xms < j.heap:
                out.append(f"-Xms{j.heap // MiB}m")
            if not f.xmx:
                out.append(f"-Xmx{j.heap // MiB}m")
            if page_kb != (host.default_hugepage_kb or 2048) and not f.large_page_size:
                out.append(f"-XX:LargePageSizeInBytes={'1g' if page_kb == 1048576 else f'{page_kb}k'}")
        elif not f.thp:
            out.append("-XX:+UseTransparentHugePages")
        return out

    def advice(self, inst: Instance, changes: list[Change]) -> list[str]:
        """Where to put the flags (apply prints this: it cannot change a running JVM)."""
        j: Jvm | None = inst.state
        mine = [c for c in changes if c.instance == inst.id and c.target == "java options"]
        if j is None or not mine:
            return []
        where = {
            "Cassandra": "conf/jvm-server.options (or jvm11-server.options / jvm17-server.options)",
            "Elasticsearch": "a file in config/jvm.options.d/",
            "OpenSearch": "a file in config/jvm.options.d/",
            "Kafka": "KAFKA_HEAP_OPTS / KAFKA_JVM_PERFORMANCE_OPTS in its environment",
            "ZooKeeper": "SERVER_JVMFLAGS in conf/java.env",
        }.get(j.app or "", "the service's start command, or JDK_JAVA_OPTIONS in its environment")
        return [f"{inst.id} ({j.app or j.flags.main or 'java'}): add {mine[0].recommended} to "
                f"{where}, then restart it; hpadvise has reserved its pages."]
