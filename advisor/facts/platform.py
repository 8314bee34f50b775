"""The platform hpadvise runs on, as /proc and /sys show it: CPU flags and times, a hypervisor,
a container around it, its own locked-memory limit (proc(5), pid_namespaces(7))."""

from __future__ import annotations

from .sysroot import SysRoot


def read_memlock(sr: SysRoot, pid: str = "self") -> tuple[str | None, str | None]:
    text = sr.read(f"/proc/{pid}/limits")
    for line in (text or "").splitlines():
        if line.startswith("Max locked memory"):
            parts = line[len("Max locked memory"):].split()
            return parts[0], parts[1]
    return None, None


def read_cpu_flags(sr: SysRoot) -> frozenset[str]:
    text = sr.read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def read_virtualization(sr: SysRoot, flags: frozenset[str]) -> tuple[str | None, str | None]:
    vendor = (sr.read("/sys/class/dmi/id/sys_vendor", quiet_missing=True) or "").strip()
    product = (sr.read("/sys/class/dmi/id/product_name", quiet_missing=True) or "").strip()
    virt = None
    if "hypervisor" in flags:
        virt = " ".join(x for x in (vendor, product) if x) or "virtual machine (hypervisor flag)"
    container = None
    if sr.exists("/.dockerenv"):
        container = "docker"
    elif sr.exists("/run/.containerenv"):
        container = "podman"
    elif sr.exists("/var/run/secrets/kubernetes.io/serviceaccount"):
        container = "kubernetes"
    return virt, container


def read_isolation(sr: SysRoot, hint: str | None) -> tuple[bool, tuple[str, ...]]:
    """Whether hpadvise runs in a container, judged by what it can see rather than by marker
    files alone (a VM built from a container image keeps /.dockerenv). The kernel's thread
    creator, kthreadd, is PID 2 in the host's PID namespace and invisible in any other
    (kernel/kthread.c; pid_namespaces(7)): a /proc without it belongs to a PID namespace of
    its own, where the host's and other containers' processes cannot be seen."""
    status = sr.read("/proc/2/status", quiet_missing=True)
    if status is None and not sr.exists("/proc/1"):
        return False, ()  # no /proc at all (an incomplete snapshot): nothing to judge
    own_ns = not (status or "").startswith("Name:\tkthreadd")
    evidence = []
    if own_ns:
        evidence.append("own PID namespace (no kthreadd at PID 2)")
    if hint:
        evidence.append(f"{hint} marker file")
    return own_ns, tuple(evidence)


def read_cpu_times(sr: SysRoot) -> dict[str, int] | None:
    """The aggregate `cpu` line of /proc/stat in USER_HZ ticks: user nice system idle iowait irq
    softirq steal ... (proc(5)). `steal` is time the hypervisor ran something else while this
    guest wanted the CPU."""
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    for line in (sr.read("/proc/stat", quiet_missing=True, limit=4096) or "").splitlines():
        f = line.split()
        if f and f[0] == "cpu":
            return dict(zip(names, map(int, f[1:9])))
    return None
