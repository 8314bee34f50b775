"""Kubernetes sizing: the pod resources that put an instance on huge pages, as YAML.

The rules, from the Kubernetes documentation ("Manage HugePages"):
- huge pages are a resource per size, `hugepages-2Mi` or `hugepages-1Gi`, in whole pages;
- a container's huge page request must equal its limit (limits are required; a request
  without a limit takes the limit's value);
- a container that requests huge pages must request memory or CPU as well;
- huge pages are accounted apart from `memory`, and are not overcommitted: the node must have
  them pre-allocated (its pool; pages allocated after boot are seen once the kubelet restarts),
  and they are charged to the pod's hugetlb cgroup, whose fault limit is exactly that resource
  (the SIGBUS trap when a server maps more than it asked for).
So an instance needs `hugepages-<size>` = its pages x page size, request = limit, and `memory`
for the rest of the server; the node's pool must hold N such pods.
"""

from __future__ import annotations

from ..api.engines import Instance
from ..planning.plan import Report
from ..facts.procs import Proc, ProcTable
from ..kit.sizing import fmt_page, headrooms, k8s_quantity, k8s_resource

MiB = 1 << 20
# Memory the server uses beyond its huge pages, when it runs: its processes' private memory
# (RssAnon, each process) and the file pages they map (RssFile, shared: counted once), measured
# now, plus a quarter for peaks, rounded up to 64 MiB, at least 256 MiB. Shared memory that is
# on 4 KiB pages now (RssShmem) moves to the huge pages and is left out.
MEMORY_MARGIN = 1.25
MEMORY_MIN = 256 * MiB


def memory_bytes(procs: ProcTable, inst: Instance) -> int | None:
    """The server's memory beyond its huge pages, from its processes now (None: not running)."""
    if not inst.pid:
        return None
    members = [Proc(procs.sr, inst.pid)] + procs.children(inst.pid)
    anon = sum(int((p.status.get("RssAnon") or "0 kB").split()[0]) for p in members)
    files = max((int((p.status.get("RssFile") or "0 kB").split()[0]) for p in members),
                default=0)
    need = int((anon + files) * 1024 * MEMORY_MARGIN)
    return max(MEMORY_MIN, -(-need // (64 * MiB)) * 64 * MiB)


def plan(r: Report, procs: ProcTable, inst: Instance, pods: int) -> dict | None:
    """What one instance needs in Kubernetes, as data: the container's resources, the node's
    pool per page size for `pods` such pods, the server's own settings; None when it has no
    huge page demand (or its engine takes no pool)."""
    place, eng = r.placements.get(inst.id), r.engines.get(inst.engine)
    if place is None or eng is None or place.status not in ("pool", "held_back"):
        return None
    kb = place.page_kb
    d = inst.demand
    # every page size it takes at once (a JVM: its heap on one, the rest on another)
    sizes = dict(d.split) if d.split and kb == d.page_kb else {kb: d.pages[kb]}
    mem = memory_bytes(procs, inst)
    charged = r.host.hugetlb_accounting
    if charged and mem is not None:  # memory.max must hold the huge pages as well
        mem += sum(n * k * 1024 for k, n in sizes.items())
    res = {k8s_resource(k): k8s_quantity(n * k * 1024)
           for k, n in sorted(sizes.items(), reverse=True)}
    if mem is not None:
        res["memory"] = k8s_quantity(mem)
    totals = {k: n * pods for k, n in sizes.items()}
    rooms = headrooms(totals, r.profile.headroom_pct, r.profile.headroom_min_pages,
                      r.host.is_gigantic)
    node = {k: totals[k] + rooms[k] for k in sorted(sizes, reverse=True)}
    resources = {"requests": dict(res), "limits": dict(res)}
    settings = eng.huge_page_settings(inst, kb, r.host)
    return {"instance": inst.id, "label": inst.label, "pages": sizes, "exact": d.exact,
            "source": d.source, "resources": resources,
            "memory_measured": mem is not None, "memory_includes_huge_pages": charged,
            "settings": settings, "pods": pods, "node_pages": node,
            "operator": eng.operator_manifest(inst, resources, settings)}


def to_yaml(p: dict) -> str:
    """One instance's plan as the YAML block to paste, the rest in comments."""
    sizes = p["pages"]
    lines = [
        f"# {p['instance']} ({p['label']}): " + " + ".join(
            f"{n} pages of {fmt_page(k)}" for k, n in sorted(sizes.items(), reverse=True)) +
        f" ({'exact' if p['exact'] else 'estimate'}: {p['source']})",
        "# Kubernetes requires hugepages requests = limits; they are not part of memory.",
        "# A container's resources (a StatefulSet's spec.template.spec.containers[].resources,",
        "# or where your operator takes a pod's resources):",
        "resources:"]
    for part in ("requests", "limits"):
        lines.append(f"  {part}:")
        lines += [f"    {k}: {v}" for k, v in p["resources"][part].items()]
    if not p["memory_measured"]:
        lines.append("# memory: not running, nothing to measure: add a memory request and "
                     "limit (Kubernetes requires memory or cpu next to hugepages) sized for "
                     "the server beyond its buffers")
    else:
        lines.append("# memory: its processes' private and file memory now, +25%, rounded up "
                     "(size it for your peak)")
    if p["memory_includes_huge_pages"]:
        lines.append("# this node's cgroup v2 is mounted with memory_hugetlb_accounting: huge "
                     "pages count against memory too, so memory includes them")
    if p["settings"]:  # comments: they belong in the server's configuration, not in a pod spec
        lines.append("# the server's own settings for huge pages, in its configuration (not "
                     "Kubernetes fields; an operator takes them among the server's parameters):")
        lines += [f"#   {k} = {v}" for k, v in p["settings"].items()]
    pods = p["pods"]
    for k, node in p["node_pages"].items():
        lines.append(f"# node: {node} pages of {fmt_page(k)} pre-allocated for {pods} such "
                     f"pod{'s' if pods > 1 else ''} ({pods} x {sizes[k]} + headroom; "
                     "vm.nr_hugepages or hugepagesz= hugepages= at boot; pages added after boot "
                     "count once the kubelet restarts), nothing else using them")
    return "\n".join(lines) + "\n"


def operator_yaml(p: dict) -> str:
    """The instance's operator manifest (the engine's), to merge into the operator's
    resource for it."""
    from ..kit.yamlout import dump
    return (f"# {p['instance']}: merge into your {p['operator'].get('kind', 'resource')} "
            f"({p['operator'].get('apiVersion', '')}); every value written as a string stays "
            "one when pasted\n" + dump(p["operator"]))


# What the DaemonSet runs on every node: check as Prometheus metrics into the directory
# node_exporter's textfile collector reads (docs/prometheus.md), every 5 minutes. --output
# replaces the file atomically (a temporary name the collector skips), and a check that
# fails writes it too, with hpadvise_check_success 0, for the alert on it.
DAEMONSET_SCRIPT = ("while true; do hpadvise check --format prometheus --output "
                    "/textfile/hpadvise.prom; sleep 300; done")


def daemonset(image: str, textfile_dir: str = "/var/lib/prometheus/node-exporter") -> dict:
    """A DaemonSet that runs check on every node as the node sees it: the host's PID namespace
    (its /proc shows every pod's processes and their cgroups), the host's cgroup tree and
    sysfs read-only (the pods' hugetlb limits, the pools), CAP_SYS_PTRACE to read other
    processes' smaps; nothing written but the metrics file."""
    ro = {"readOnly": True}
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "hpadvise", "labels": {"app": "hpadvise"}},
        "spec": {
            "selector": {"matchLabels": {"app": "hpadvise"}},
            "template": {
                "metadata": {"labels": {"app": "hpadvise"}},
                "spec": {
                    "hostPID": True,
                    "containers": [{
                        "name": "hpadvise", "image": image,
                        "command": ["sh", "-c", DAEMONSET_SCRIPT],
                        "securityContext": {"runAsUser": 0, "readOnlyRootFilesystem": True,
                                            "capabilities": {"add": ["SYS_PTRACE"]}},
                        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                                      "limits": {"memory": "256Mi"}},
                        "volumeMounts": [
                            {"name": "sys", "mountPath": "/sys", **ro},
                            {"name": "cgroup", "mountPath": "/sys/fs/cgroup", **ro},
                            {"name": "textfile", "mountPath": "/textfile"}]}],
                    "volumes": [
                        {"name": "sys", "hostPath": {"path": "/sys"}},
                        {"name": "cgroup", "hostPath": {"path": "/sys/fs/cgroup"}},
                        {"name": "textfile", "hostPath": {"path": textfile_dir,
                                                          "type": "DirectoryOrCreate"}}]}}}}


def snippet(r: Report, procs: ProcTable, inst: Instance, pods: int) -> str | None:
    """The YAML for one instance, or None when it has no huge page demand."""
    p = plan(r, procs, inst, pods)
    return to_yaml(p) if p else None
