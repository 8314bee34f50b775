"""A JVM's findings: its flags as given, its heap's huge pages or THP as smaps shows them, and
the host's THP settings as they bear on it (docs/findings.md lists the codes)."""

from __future__ import annotations

from hpadvise.api.face import (ADVISED, Code, Codes, Finding, HostFacts, Instance, THP_DIR,
                               TRANSHUGE, fmt_bytes, fmt_page, pages_for, thp_sizes)

from .flags import DOCS, MiB
from .state import Jvm
from .thp import g1_madvise_bug

THP_ENABLED = f"{THP_DIR}/enabled"

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


def findings(inst: Instance, j: Jvm | None, host: HostFacts, static: bool) -> list[Finding]:
    """What a JVM's flags, mappings and host say of it. `static`: the profile would give
    this heap static pages (JvmEngine.wants_static)."""
    f: list[Finding] = []
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
