"""`check --format prometheus`: the report as metrics in the Prometheus text exposition format,
for node_exporter's textfile collector (write it with --output into the collector's directory;
the file is replaced atomically, as the collector's documentation asks).

Metric names are part of hpadvise's interface (README, "Prometheus"): they change only with
the JSON schema version. Every sample of a family shares one `# HELP` and one `# TYPE` line
(exposition format, "Text-based format"); label values are escaped as it prescribes.
"""

from __future__ import annotations

from .findings import SEVERITIES
from .plan import Report


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


def to_prometheus(r: Report, duration_s: float, now: float) -> str:
    o = _Out()
    h = r.host
    o.family("hpadvise_check_success", "1 when the check read the host and sized every "
             "instance without an input error", [({}, 0 if r.errors else 1)])
    o.family("hpadvise_check_duration_seconds", "How long the check took",
             [({}, round(duration_s, 3))])
    o.family("hpadvise_check_timestamp_seconds", "When the check ran (Unix time)",
             [({}, round(now, 3))])

    pools = []
    for p in h.pools:
        for state, v in (("total", p.nr_pages), ("free", p.free_pages),
                         ("reserved", p.resv_pages), ("surplus", p.surplus_pages)):
            if v is not None:
                pools.append(({"size_kb": p.size_kb, "node": "all", "state": state}, v))
        for n in p.nodes:
            for state, v in (("total", n.nr_pages), ("free", n.free_pages),
                             ("surplus", n.surplus_pages)):
                if v is not None:
                    pools.append(({"size_kb": p.size_kb, "node": n.node, "state": state}, v))
    o.family("hpadvise_pool_pages", "Static huge pages per page size and NUMA node "
             "(node=\"all\": the whole pool; reserved is per pool only)", pools)
    o.family("hpadvise_pool_recommended_pages", "The pool the plan recommends per page size",
             [({"size_kb": p.size_kb}, p.target_pages) for p in r.pools])

    thp = []
    for knob, k in (("enabled", h.thp.enabled), ("defrag", h.thp.defrag),
                    ("shmem_enabled", h.thp.shmem_enabled)):
        for choice in k.choices:
            thp.append(({"knob": knob, "mode": choice}, 1 if choice == k.value else 0))
    o.family("hpadvise_thp_mode", "Transparent huge page modes: 1 for the active one", thp)

    need, on, held = [], [], []
    for i in r.instances:
        lab = {"engine": i.engine, "instance": i.id}
        if i.demand:
            need.append(({**lab, "size_kb": i.demand.page_kb},
                         i.demand.pages.get(i.demand.page_kb, 0)))
            held.append(({**lab, "size_kb": i.demand.page_kb}, i.demand.held_pages))
        if i.running and i.backing is not None:
            on.append((lab, 1 if i.backing == "hugetlb" else 0))
    o.family("hpadvise_instance_pages_needed", "Huge pages an instance needs at its page size",
             need)
    o.family("hpadvise_instance_pages_held", "Huge pages an instance holds now", held)
    o.family("hpadvise_instance_on_huge_pages", "1 when a running instance's shared memory "
             "is on static huge pages, 0 when it is not (the silent-fallback alarm)", on)

    o.family("hpadvise_finding", "A finding of the check, by code, severity and instance "
             "(docs/findings.md)",
             [({"code": f.code, "severity": f.severity, "instance": f.instance or ""}, 1)
              for f in r.findings])
    counts = {s: 0 for s in SEVERITIES}
    for f in r.findings:
        counts[f.severity] += 1
    o.family("hpadvise_findings", "Findings by severity",
             [({"severity": s}, n) for s, n in counts.items()])
    return "\n".join(o.lines) + "\n"
