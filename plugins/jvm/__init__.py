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
  JDK >= 9), the command line with @argfiles expanded, _JAVA_OPTIONS (HotSpot parses it last:
  arguments.cpp, Arguments::parse_vm_init_args); for -XX flags the last one wins
  (JDK docs, "java" command, "Using the JDK_JAVA_OPTIONS Launcher Environment Variable").
"""

from __future__ import annotations

import os

from hpadvise.api.face import (ADVISED, Change, Demand, Engine, EngineOption, Finding, HostFacts,
                               Instance, Proc, ProcTable, Profile, Targets, as_seen_inside,
                               backing_of, exe_of, fmt_bytes, fmt_page, hugetlb_pages, memfd_bytes,
                               proc_root, Unknown)

from . import findings as _findings
from .findings import CODES, THP_ENABLED
from .flags import (DOCS, KNOWN, MiB, JvmFlags, jcmd_flags, java_home, java_major, layout,  # noqa: F401
                    sysv_large_pages,
                    probe, read_flags, reservations, split)
from .state import Jvm
from .thp import HEAP_MEMFD, heap_on_thp, read_release, stack_risk


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
        label = f"{app or 'java'} (pid {p.pid}" + (f", main {f.main})" if f.main else ")")
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
                        version=str(major) if major else Unknown(
                            f"the release of jvm:{p.pid}", "its JDK's release file (beside "
                            "bin/java) was not read" + ("" if exe else ": its binary is unknown"),
                            "run as root or as its owner" if sr.live else ""),
                        settings={k: v for k, v in settings.items() if v is not None},
                        state=j)
        inst.shm_sysv = sysv_large_pages(f, major)
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
            if f.thp and j.heap_knob == "shmem_enabled":  # ZGC commits its heap's memfd
                # through a mapping it madvise()s and unmaps (ZPhysicalMemoryBacking)
                inst.thp_advised = (HEAP_MEMFD,)
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
            from hpadvise.api.face import parse_bytes
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
        jdk = f"JDK {j.major}" if j.major else "JDK of unknown release"
        inst.demand = Demand(inst.id, None, page_kb, pages, exact,
                             f"-XX:+UseLargePages reservations ({jdk}, {f.gc}): {parts}",
                             selectable=False,
                             held_pages=j.held.get(page_kb, 0),
                             split=need if len(need) > 1 else None,
                             held_split=dict(j.held) if len(need) > 1 else None)

    def what_if(self, args: list[str], host: HostFacts, version: str | None,
                targets: Targets) -> Instance:
        """A planned JVM (`hpadvise size jvm -- FLAGS`): the flags as this host's JVM (or the
        one --java names) resolves them (probe), sized like a running one with
        -XX:+UseLargePages."""
        from hpadvise.api.face import InputError
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
                        f"({' '.join(args) or 'defaults'})".replace("  ", " "), False,
                        version=str(major) if major else None,
                        settings={"heap_max": fmt_bytes(heap), "gc": f.gc}, state=j)
        self._size(inst, j, host)
        return inst

    def uses_pool(self, inst: Instance, profile: Profile) -> bool:
        j: Jvm | None = inst.state
        return j is not None and self.wants_static(j, profile)

    def outlives_process(self, inst: Instance) -> bool:
        return False  # "jvm:<pid>": a restarted JVM is another instance

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
        j: Jvm | None = inst.state
        return _findings.findings(inst, j, host, j is not None and self.wants_static(j, profile))

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
        # (JAVA_TOOL_OPTIONS < JDK_JAVA_OPTIONS < the command line and its @files <
        # _JAVA_OPTIONS): the
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
