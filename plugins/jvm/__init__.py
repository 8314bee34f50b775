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
from dataclasses import dataclass, field

from hpadvise.engines import Change, Demand, Engine, EngineOption, Finding, Instance, Targets
from hpadvise.findings import TRANSHUGE, Code, Codes
from hpadvise.host import HostFacts
from hpadvise.procs import Proc, ProcTable, backing_of, hugetlb_pages, memfd_bytes
from hpadvise.profiles import Profile
from hpadvise.roots import as_seen_inside, exe_of, proc_root
from hpadvise.sizing import fmt_bytes, fmt_page, pages_for

from hpadvise.thp_policy import ADVISED, thp_sizes

from .thp import g1_madvise_bug, heap_on_thp, read_release, stack_risk
from .flags import (DOCS, KNOWN, MiB, JvmFlags, jcmd_flags, java_home, java_major, layout,  # noqa: F401
                    probe, read_flags, reservations, split)


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
    held: dict[int, int] = field(default_factory=dict)  # hugetlb pages mapped, per size (kB)
    regions: list = field(default_factory=list)  # (what, bytes, page kB or None) as sized
    anon_huge_kb: int | None = None
    # THP in the mappings that hold the heap (thp.heap_on_thp), the knob governing them, how
    # it was read, and whether the process switched THP off for itself (prctl)
    heap_thp_kb: int | None = None
    heap_knob: str = "enabled"
    heap_evidence: str = ""
    prctl_off: bool = False
    observe_note: str | None = None
    # Thread stacks THP enabled=always would page in whole (JDK-8312182), as evidence; None
    # when they are safe (small stacks, or a JDK with THPStackMitigation) or unknown.
    stack_risk: str | None = None
    release: str | None = None  # its JDK's `release` file (JAVA_VERSION, OS_ARCH)
    # in a root of its own that does not show the kernel's THP settings: HotSpot reads its
    # THP mode there at start and, finding none, turns -XX:+UseTransparentHugePages off
    thp_hidden: str | None = None


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"

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
    Code("jvm.thp.no_sys", "warn", "The JVM cannot see the THP settings: THP disabled for it",
         "src/hotspot/os/linux/hugepages.cpp, THPSupport::scan_os"),
    Code("jvm.thp.thread_stacks", "warn",
         "THP enabled=always pages in this JVM's thread stacks whole", DOCS),
    Code("jvm.huge_pages.none", "info",
         "Neither -XX:+UseLargePages nor -XX:+UseTransparentHugePages", DOCS),
    Code("jvm.demand.estimate", "info", "Page count is an estimate", DOCS),
    Code("jvm.zgc.page_size", "crit", "ZGC refuses any large page size but 2 MiB", DOCS),
)


class JvmEngine(Engine):
    """Java processes: static huge pages with -XX:+UseLargePages, or THP with
    -XX:+UseTransparentHugePages, by profile. A running JVM's flags cannot be changed: apply
    sets the host side and prints the flags to add and where."""
    options = (EngineOption("--java", "The JDK whose java `size jvm` asks (default: java on "
                            "PATH): its version decides each region's page size and its THP "
                            "rules.", "PATH", commands=("size",)),)

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
        fs = procs.fs(p.pid)  # its files (argfiles, the JDK's release) in its own root
        cwd = as_seen_inside(proc_root(fs), sr.readlink(f"/proc/{p.pid}/cwd"))
        f = read_flags(fs, p, cwd)
        owner = procs.owner(p)
        if f.xmx is None and sr.live:
            out = jcmd_flags(p.pid, owner)
            if out:
                f.source = "jcmd VM.flags (the running JVM's word)"
                for tok in out.split():
                    if tok.startswith("-XX:"):
                        f.apply(tok)
        mem_total = (host.mem.total_kb or 0) * 1024
        heap, src = (f.xmx, "-Xmx") if f.xmx else \
            (mem_total // 4, "default: 25% of RAM (MaxRAMPercentage)")
        exe = exe_of(sr, p.pid)  # its JDK's path in its own root
        home = os.path.dirname(os.path.dirname(exe)) if exe else None
        major = java_major(sr, p, fs)
        app = KNOWN.get(f.main or "")
        label = f"{app or 'java'} (pid {p.pid}, main {f.main or '?'})"
        j = Jvm(p.pid, owner, f, major, app, heap, src)
        j.release = fs.read(f"{home}/release", quiet_missing=True) if home else None
        if proc_root(fs) is not None and not fs.exists(THP_ENABLED):
            j.thp_hidden = THP_ENABLED
        j.stack_risk = stack_risk(f.stack, major, j.release, str(fs.path(home)) if home else None,
                                  host.thp.pmd_size_kb)
        settings = {"heap_max": fmt_bytes(heap), "heap_min": fmt_bytes(f.xms) if f.xms else None,
                    "gc": f.gc, "UseLargePages": f.large_pages,
                    "UseTransparentHugePages": f.thp, "main": f.main,
                    "sources": {k: f.sources[k] for k in (
                        "UseLargePages", "UseTransparentHugePages", "LargePageSizeInBytes",
                        "-Xmx") if k in f.sources} or None}
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
            # ZGC's heap: a memfd mapped up to three times, each page counted once
            j.held = hugetlb_pages(maps, memfd_bytes(sr, p.pid, maps))
            j.hugetlb_kb = sum(kb * n for kb, n in j.held.items())
            j.anon_huge_kb = sum(m.anon_huge_kb for m in maps)
            j.heap_knob, j.heap_thp_kb, j.heap_evidence = heap_on_thp(maps, f.gc, heap)
        j.prctl_off = p.status.get("THP_enabled") == "0"
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
        """The pages -XX:+UseLargePages takes, region by region, each on the page size the
        JDK picks for it (flags.layout): one JVM can need pages of two sizes at once."""
        f = j.flags
        sizes = tuple(sorted(host.page_sizes_kb)) or (2048,)
        default = host.default_hugepage_kb or 2048
        large = (f.large_page_size // 1024) if f.large_page_size and \
            f.large_page_size // 1024 in sizes else default
        regions = j.regions = layout(f, j.heap, j.major, large, sizes)
        need = split(regions)
        page_kb = next((kb for w, _, kb in regions if w == "heap" and kb), large)
        # Alternatives, were the JVM told another large page size (every region that can)
        pages = {kb_: split(layout(f, j.heap, j.major, kb_, sizes)).get(kb_, 0)
                 for kb_ in sizes}
        pages[page_kb] = need.get(page_kb, 0)
        parts = ", ".join(f"{w} {fmt_bytes(b)} on {fmt_page(kb) if kb else '4 KiB'}"
                          for w, b, kb in regions)
        exact = f.gc in ("G1", "Parallel", "Serial", "Z") and f.xmx is not None
        inst.demand = Demand(inst.id, None, page_kb, pages, exact,
                             f"-XX:+UseLargePages reservations (JDK {j.major or '?'}, {f.gc}): "
                             f"{parts}", selectable=False,
                             held_pages=j.held.get(page_kb, 0),
                             split=need if len(need) > 1 else None,
                             held_split=dict(j.held) if len(need) > 1 else None)

    def what_if(self, args: list[str], host: HostFacts, version: str | None,
                targets: Targets) -> Instance:
        """A planned JVM (`hpadvise size jvm -- FLAGS`): the flags as this host's JVM (or the
        one --java names) resolves them (probe), sized like a running one with
        -XX:+UseLargePages."""
        from hpadvise.errors import InputError
        bad = [a for a in args if not a.startswith("-")]
        if bad:
            raise InputError(f"{bad[0]!r}: give JVM flags (after --), e.g. "
                             "hpadvise size jvm -- -Xmx16g -XX:+UseLargePages")
        java = (targets.get("java") or (None,))[-1]
        values, major = probe(args, java)
        if version and major and str(major) != version:
            raise InputError(f"--server-version {version}: the installed JVM is {major}")
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
        import shutil
        home = java_home(java or shutil.which("java"))
        j.stack_risk = stack_risk(f.stack, major, read_release(home) if home else None,
                                  home, host.thp.pmd_size_kb)
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
        if j is None:
            return {}
        static = self.wants_static(j, profile)
        if j.stack_risk:  # always would page its thread stacks in whole (thp.py)
            return {"enabled": ({"madvise", "never"} if static else {"madvise"},
                                f"{inst.id}: under always, {j.stack_risk}")}
        if static:
            return {}
        need = {"enabled": ({"madvise", "always"},
                            f"{inst.id} uses -XX:+UseTransparentHugePages (madvise on its heap)")}
        if j.flags.gc == "Z":  # its heap is a memfd: shared memory (thp.heap_on_thp)
            need["shmem_enabled"] = (set(ADVISED["shmem_enabled"]), f"{inst.id}: ZGC's heap is "
                                     "a shared memfd, on THP only under shmem_enabled advise")
        return need

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
        if fl.large_pages and fl.gc == "Z" and fl.large_page_size not in (None, 2 * MiB):
            f.append(CODES["jvm.zgc.page_size"](
                "ZGC takes 2 MiB large pages only: with another -XX:LargePageSizeInBytes the "
                "JVM does not start (measured on JDK 21 and 25). Remove the flag.",
                f"-XX:LargePageSizeInBytes={fmt_bytes(fl.large_page_size)}", iid))
        if fl.large_pages:
            # what each page size should hold (the regions the JDK puts on it) against smaps
            expected = dict(d.split) if d and d.split else \
                ({d.page_kb: d.pages.get(d.page_kb, 0)} if d else {})
            g1_small_heap = fl.gc == "G1" and fl.xms is not None and fl.xms < j.heap
            if g1_small_heap:
                f.append(CODES["jvm.large_pages.heap_small_pages"](
                    "With explicit large pages G1 maps the heap on huge pages only when it is "
                    "committed up front. Set -Xms equal to -Xmx.",
                    f"-Xms {fmt_bytes(fl.xms)}, -Xmx {fmt_bytes(j.heap)}", iid))
                heap = next((r for r in j.regions if r[0] == "heap" and r[2]), None)
                if heap:
                    expected[heap[2]] -= pages_for(heap[1], heap[2] * 1024)
            if fl.gc == "Z" and (fl.xms or 0) < j.heap:
                # ZGC takes the heap's pages as it commits it: -Xms at the start, up to -Xmx
                heap = next((r for r in j.regions if r[0] == "heap" and r[2]), None)
                if heap:
                    expected[heap[2]] -= pages_for(heap[1], heap[2] * 1024) - \
                        pages_for(min(fl.xms or 0, heap[1]), heap[2] * 1024)
            short = {kb: n for kb, n in expected.items() if j.held.get(kb, 0) < n}
            if hkb is not None and short:
                for kb, n in sorted(short.items(), reverse=True):
                    names = [w for w, _, k in j.regions if k == kb and
                             not (w == "heap" and g1_small_heap)] or ["its regions"]
                    what = names[0] if len(names) == 1 else \
                        ", ".join(names[:-1]) + " and " + names[-1]
                    f.append(CODES["jvm.large_pages.fallback"](
                        "The JVM could not reserve these huge pages and carried on with 4 KiB "
                        "pages for them (it warns once on stderr). Size the pool with the "
                        "count below and restart it.",
                        f"smaps: {j.held.get(kb, 0)} of {n} pages of {fmt_page(kb)}; on that "
                        f"size: {what}", iid,
                        title=f"{n - j.held.get(kb, 0)} of its {fmt_page(kb)} pages missing: "
                              f"{'the ' + what if len(names) == 1 else 'some of ' + what} "
                              "fell back to normal pages"))
            elif hkb:
                on = ", ".join(f"{fmt_page(kb)}: {n} pages" for kb, n in
                               sorted(j.held.items(), reverse=True))
                f.append(CODES["jvm.large_pages.active"](
                    "Running on huge pages now.", f"smaps: {fmt_bytes(hkb * 1024)} hugetlb ({on})",
                    iid, title="Heap and code cache on " + " and ".join(
                        f"{fmt_page(kb)}" for kb in sorted(j.held, reverse=True)) + " pages"))
        elif fl.thp:
            knob = j.heap_knob  # the heap's mapping decides: a ZGC heap is shared memory
            if j.thp_hidden:  # measured with JDK 21 in a root without /sys: "UseTransparent
                # HugePages disabled, transparent huge pages are not supported by the OS"
                f.append(CODES["jvm.thp.no_sys"](
                    f"HotSpot reads the THP mode from {j.thp_hidden} at start; its root does not "
                    "show it, so -XX:+UseTransparentHugePages is turned off (one warning on "
                    "its output). Make /sys visible there (read-only) and restart it.",
                    f"{j.thp_hidden}: missing in its root", iid))
            elif not thp_sizes(host.thp, knob, advised=True, prctl_off=j.prctl_off):
                why = "the process switched THP off (prctl, THP_enabled: 0)" if j.prctl_off \
                    else f"{knob} = {getattr(host.thp, knob).value} (and no size of its own)"
                f.append(CODES["jvm.thp.never"](
                    f"The JVM madvise()s its heap for THP; with {why} nothing happens. Set "
                    f"{knob}={ADVISED[knob][0]}.", f"transparent_hugepage/{knob}: {why}", iid))
            elif not j.heap_thp_kb and inst.backing is not None:
                bug = g1_madvise_bug(j.release, j.flags.gc, host.thp.enabled.value)
                f.append(CODES["jvm.thp.none"](
                    (bug + ".") if bug else "No THP in the heap's mapping: memory too "
                    "fragmented, defrag too lazy to collapse it yet, or a heap not yet touched.",
                    j.heap_evidence, iid))
            elif inst.backing is not None:
                f.append(CODES["jvm.thp.active"](
                    "Running with transparent huge pages.", j.heap_evidence, iid))
        else:
            static = self.wants_static(j, profile)
            f.append(CODES["jvm.huge_pages.none"](
                "Add -XX:+UseLargePages and -Xms equal to -Xmx; the pool below includes this "
                 "JVM." if static else
                 "Add -XX:+UseTransparentHugePages (with THP enabled=madvise): a heap of this "
                 "size does not warrant a static reservation (profile jvm.static_min_heap).",
                f"heap {fmt_bytes(j.heap)} ({j.heap_source})", iid))
        if j.stack_risk and host.thp.enabled.value == "always":
            f.append(CODES["jvm.thp.thread_stacks"](
                "khugepaged can fold the stacks of threads started close together into huge "
                "pages that stay resident whole (JDK-8312182: 10,000 threads with -Xss2m took "
                "2-3 GB under always against 300-600 MB otherwise). Set THP enabled=madvise "
                "(with -XX:+UseTransparentHugePages the heap keeps THP), use a JDK update with "
                "THPStackMitigation (17.0.x, 21.0.x, 22 and later), or smaller stacks.",
                j.stack_risk, iid))
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
        # a flag set the other way in a layer that outranks where it would be added
        # (JAVA_TOOL_OPTIONS < JDK_JAVA_OPTIONS < the command line and its @files): the
        # addition would not take there, so it goes where that flag is
        wins = []
        for a in str(mine[0].recommended).split():
            if not a.startswith("-XX:"):
                continue
            name = a[4:].lstrip("+-").split("=", 1)[0]
            other = a[4] in "+-" and j.flags.last.get(name) == (a[4] == "-")
            if name in j.flags.sources and (other or "=" in a):
                wins.append(f"{name} comes from {j.flags.sources[name]}")
        if wins:
            return [f"{inst.id} ({j.app or j.flags.main or 'java'}): set "
                    f"{mine[0].recommended} where the flags it replaces are ("
                    + "; ".join(wins) + "), which outranks " + where
                    + ", then restart it; hpadvise has reserved its pages."]
        return [f"{inst.id} ({j.app or j.flags.main or 'java'}): add {mine[0].recommended} to "
                f"{where}, then restart it; hpadvise has reserved its pages."]
