"""`check --format prometheus`: the report as metrics in the Prometheus text exposition format,
for node_exporter's textfile collector (write it with --output into the collector's directory;
the file is replaced atomically, as the collector's documentation asks).

Metric names are part of hpadvise's interface (docs/prometheus.md). Every sample of a family shares one `# HELP` and one `# TYPE` line
(exposition format, "Text-based format"); label values are escaped as it prescribes.
"""

from __future__ import annotations

from ..facts.sysctls import PLANNED
from ..facts.thp_knobs import SIZES, THP
from ..kit.findings import SEVERITIES
from ..planning.plan import Report


def _esc(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Out:
    def __init__(self):
        self.lines: list[str] = []

    def family(self, name: str, help_: str, samples: list[tuple[dict, float]],
               kind: str = "gauge") -> None:
        self.lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        for labels, value in samples:
            lab = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
            num = str(int(value)) if float(value).is_integer() else repr(float(value))
            self.lines.append(f"{name}{{{lab}}} {num}" if lab else f"{name} {num}")


def _size(kb: int) -> dict:
    """A page size as a label in the base unit (Prometheus naming: bytes, not kB)."""
    return {"page_size_bytes": kb * 1024}


def to_prometheus(r: Report, duration_s: float, now: float) -> str:
    """Prometheus's rules (docs "Metric and label naming", "Writing exporters"): base units;
    no label named `instance` or `job`, which the scrape itself sets (with honor_labels false
    they would arrive as exported_instance), so the database instance is `db_instance`; every
    family such that sum() over any of its labels means something (the whole pool and its
    NUMA nodes are separate families, as are total and free pages); a _build_info gauge."""
    from ..facts.dists import version
    ver = version("hpadvise") or "unknown"
    o = _Out()
    h = r.host
    o.family("hpadvise_build_info", "hpadvise's version, as a label", [({"version": ver}, 1)])
    o.family("hpadvise_check_success", "1 when the check read the host and sized every "
             "instance without an input error", [({}, 0 if r.errors else 1)])
    o.family("hpadvise_check_duration_seconds", "How long the check took",
             [({}, round(duration_s, 3))])
    o.family("hpadvise_check_timestamp_seconds", "When the check ran (Unix time)",
             [({}, round(now, 3))])

    for name, attr, help_ in (("pages", "nr_pages", "Static huge pages in the pool"),
                              ("free_pages", "free_pages", "Free pages of the pool"),
                              ("reserved_pages", "resv_pages",
                               "Pages of the pool reserved, not faulted yet"),
                              ("surplus_pages", "surplus_pages", "Surplus pages of the pool")):
        o.family(f"hpadvise_pool_{name}", f"{help_}, per page size",
                 [(_size(p.size_kb), getattr(p, attr)) for p in h.pools
                  if getattr(p, attr) is not None])
    for name, attr, help_ in (("pages", "nr_pages", "Static huge pages"),
                              ("free_pages", "free_pages", "Free huge pages")):
        o.family(f"hpadvise_pool_node_{name}", f"{help_} on each NUMA node, per page size",
                 [({**_size(p.size_kb), "node": n.node}, getattr(n, attr)) for p in h.pools
                  for n in p.nodes if getattr(n, attr) is not None])
    o.family("hpadvise_pool_recommended_pages", "The pool the plan recommends per page size",
             [(_size(p.size_kb), p.target_pages) for p in r.pools])

    thp = []
    for knob, k in ((f, getattr(h.thp, f)) for f in THP):  # the THP files (thp_knobs.py)
        for choice in k.choices:
            thp.append(({"knob": knob, "mode": choice}, 1 if choice == k.value else 0))
    o.family("hpadvise_thp_mode", "Transparent huge page modes: 1 for the active one", thp)
    o.family("hpadvise_thp_size_mode", "Each THP size's own mode (hugepages-<kB>kB/<knob>; "
             "inherit follows the top level): 1 for the active one",
             [({"thp_size_bytes": kb * 1024, "knob": f, "mode": w}, 1 if w == now else 0)
              for kb, d in sorted(h.thp.mthp.items()) for f, z in SIZES.items()
              if (now := d.get(f)) is not None for w in z.words])
    for s in PLANNED:  # each kernel setting a plan may change, declared in facts/sysctls.py
        o.family(s.metric, f"{s.name} now: {s.meaning}",
                 [({}, h.sysctls[s.name])] if h.sysctls.get(s.name) is not None else [])
        o.family(f"{s.metric}_recommended", f"The {s.name} the plan sets, where it changes it",
                 [({}, c.recommended) for c in r.changes
                  if c.kind == "sysctl" and c.knob == s.name])

    need, on, held = [], [], []
    for i in r.instances:
        lab = {"engine": i.engine, "db_instance": i.id}
        d = i.demand
        if d:
            for kb, n in (d.split or {d.page_kb: d.pages.get(d.page_kb, 0)}).items():
                need.append(({**lab, **_size(kb)}, n))
            for kb, n in (d.held_split or {d.page_kb: d.held_pages}).items():
                held.append(({**lab, **_size(kb)}, n))
        placed = r.placements.get(i.id)
        # only instances the plan puts on static pages: one served by THP (Redis, a JVM with
        # -XX:+UseTransparentHugePages) is never on them, and a 0 for it would be no alarm
        if i.running and i.backing is not None and placed is not None \
                and placed.status == "pool":
            on.append((lab, 1 if i.backing == "hugetlb" else 0))
    o.family("hpadvise_instance_pages_needed", "Huge pages an instance needs, per page size",
             need)
    o.family("hpadvise_instance_pages_held", "Huge pages an instance holds now, per page size",
             held)
    o.family("hpadvise_instance_on_huge_pages", "1 when a running instance the plan puts on "
             "static huge pages is on them, 0 when it is not (the silent-fallback alarm)", on)

    o.family("hpadvise_finding", "A finding of the check, by code, severity and database "
             "instance (docs/findings.md)",
             [({"code": f.code, "severity": f.severity, "db_instance": f.instance or ""}, 1)
              for f in r.findings])
    counts = {s: 0 for s in SEVERITIES}
    for f in r.findings:
        counts[f.severity] += 1
    o.family("hpadvise_findings", "Findings by severity",
             [({"severity": s}, n) for s, n in counts.items()])
    return "\n".join(o.lines) + "\n"
