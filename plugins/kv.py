"""Redis/Valkey and MongoDB: no static huge pages, but THP advice that differs per vendor and
version, and they share hosts with the others. Their needs go into the one THP plan for the
host (Engine.thp_needs), so a conflict with PostgreSQL or a JVM is found and explained.

Vendor guidance (each cited in the findings):
- Redis (redis.io docs, "Diagnosing latency issues", and the startup warning "you have
  Transparent Huge Pages (THP) support enabled in your kernel"): THP `always` causes latency
  spikes and copy-on-write memory blowup at fork (BGSAVE/AOF rewrite); use madvise or never.
  Redis >= 6.2.7 / 7.0 also switches THP off for itself (config `disable-thp yes`, prctl).
- MongoDB >= 8.0 (MongoDB Manual, "TCMalloc Performance Optimization for a Self-Managed
  Deployment", section "Enable Transparent Hugepages (THP)": the upgraded TCMalloc with per-CPU
  caches wants THP): enabled=always, defrag=defer+madvise, khugepaged/max_ptes_none=0. Only on
  x86-64 and arm64 (the same page, "Platform Support"): on ppc64le and s390x it keeps the
  legacy TCMalloc, and THP is to be disabled as for <= 7.0.
- MongoDB <= 7.0 (MongoDB Manual, "Disable Transparent Hugepages (THP) for Self-Managed
  Deployments"): THP never; the same page says hosts with tuned need a custom tuned profile too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpadvise.api.face import (Code, Codes, Engine, Finding, HostFacts, Instance, Proc, ProcTable,
                               Profile, Targets, backing_of, binary_version, fmt_bytes, fmt_page,
                               machine_of, thp_sizes, Unknown, size_dir)

REDIS_DOCS = "redis.io, Diagnosing latency issues"
MONGO8 = ("MongoDB 8.0 Manual, TCMalloc Performance Optimization for a Self-Managed Deployment: "
          "Enable Transparent Hugepages (THP)")
MONGO7 = "MongoDB 7.0 Manual, Disable Transparent Hugepages (THP) for Self-Managed Deployments"
MONGO8_PLATFORMS = ("MongoDB 8.0 Manual, TCMalloc Performance Optimization for a Self-Managed "
                    "Deployment: Platform Support")
# The architectures whose MongoDB >= 8.0 builds use the upgraded TCMalloc (MONGO8_PLATFORMS),
# as `uname -m` names them.
TCMALLOC_ARCHES = ("x86_64", "aarch64")

REDIS_CODES = Codes(
    Code("redis.thp.ok", "ok", "THP enabled suits Redis", REDIS_DOCS),
    Code("redis.thp.always", "warn", "THP is always", REDIS_DOCS, ("info",)),
)
MONGO_CODES = Codes(
    Code("mongodb.version.unknown", "info", "MongoDB version unknown", MONGO8),
    Code("mongodb.thp", "warn", "THP is not as this MongoDB version wants it",
         f"{MONGO8}; {MONGO7}", ("ok",)),
)


def _vt(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v or "")[:3])


@dataclass
class Observed:
    """What a Redis or MongoDB process shows in /proc (the instance's engine state)."""
    thp_enabled: str | None  # "0" when the process switched THP off for itself (prctl)
    anon_huge_kb: int | None = None
    arch: str | None = None  # the architecture it runs as (procs.machine_of), None: unread


def _observe(inst: Instance, p: Proc, host: HostFacts) -> None:
    maps = p.smaps
    inst.page_tables_kb = p.vm_pte_kb
    inst.state = seen = Observed(p.status.get("THP_enabled"), arch=machine_of(p.sr, p.pid))
    if maps is not None:
        seen.anon_huge_kb = sum(m.anon_huge_kb for m in maps)
        b = backing_of(maps, host.thp.pmd_size_kb, host.base_page_bytes // 1024)
        inst.backing, inst.backing_page_kb = b.kind, b.page_kb


def _discover(eng: Engine, host: HostFacts, procs: ProcTable, port_re: str, default_port,
              version_re: str, flavour) -> list[Instance]:
    """Processes of `eng` as instances "<flavour>:<port>", with version and THP observed."""
    out = []
    for p in procs.by_name(*eng.process_names):
        argv = p.cmdline
        if not argv:  # exited while we looked
            continue
        mt = re.search(port_re, " ".join(argv))
        port = mt.group(1) if mt else default_port(p)
        fl = flavour(p)
        # argv[0] kept: Debian's redis-server is a link to redis-check-rdb, which picks its
        # role from the name it was called by.
        ver = binary_version(procs.sr, p.pid, version_re, argv0=p.comm)
        inst = Instance(eng.name, f"{fl}:{port}", f"{fl} (port {port}, pid {p.pid})", True,
                        pid=p.pid, owner=procs.owner(p), version=ver or Unknown(
                            f"the release of {fl}:{port}", "its binary's --version was not "
                            "read (a snapshot runs nothing; live, the binary would not run)"),
                        settings={"flavour": fl, "port": port})
        _observe(inst, p, host)
        out.append(inst)
    return out


class RedisEngine(Engine):
    """Redis / Valkey: no static pages; THP must not be `always` (latency spikes, copy-on-write
    blowup at fork). Its needs join the host's one THP plan."""
    name = "redis"
    description = "Redis / Valkey (THP guidance only: not `always`)"
    process_names = ("redis-server", "valkey-server")
    codes = REDIS_CODES

    def discover(self, host: HostFacts, procs: ProcTable, targets: Targets) -> list[Instance]:
        # Redis sets its title to "redis-server HOST:PORT" (setproctitle)
        return _discover(self, host, procs, r":(\d+)", lambda p: str(p.pid), r"v=(\S+)",
                         lambda p: "valkey" if p.comm.startswith("valkey") else "redis")

    def uses_pool(self, inst: Instance, profile: Profile) -> bool:
        return False

    def thp_needs(self, inst: Instance, profile: Profile) -> dict[str, tuple[set[str], str]]:
        return {"enabled": ({"madvise", "never"},
                            f"{inst.id}: Redis advises against THP always (latency, fork "
                            "copy-on-write)")}

    def findings(self, inst: Instance, host: HostFacts, profile: Profile) -> list[Finding]:
        en = host.thp.enabled.value
        # what its memory (private anonymous, never madvise()d) gets: a per-size knob at
        # always gives it THP of that size whatever `enabled` says (thp_policy.py)
        sizes = thp_sizes(host.thp, "enabled", advised=False)
        if not sizes:
            return [REDIS_CODES["redis.thp.ok"]("Redis only objects to always.", f"enabled={en}",
                                                inst.id, title=f"THP enabled={en} suits Redis")]
        per = en != "always"
        what = "enabled=always" if not per else "per-size " + ", ".join(
            f"{size_dir(kb)}/enabled=always" for kb in sizes) + f" under enabled={en}"
        seen: Observed = inst.state or Observed(None)
        off = seen.thp_enabled == "0"
        return [REDIS_CODES["redis.thp.always"](
            f"THP always ({what}) makes fork-based persistence (BGSAVE, AOF rewrite) copy "
            "huge pages and adds latency spikes; set " + ("those sizes to inherit or never"
                                                          if per else "enabled=madvise") + "." + (
                " This Redis disabled THP for its own process (disable-thp yes), but the "
                "host setting still affects its forks' neighbours." if off else ""),
            f"{what}; AnonHugePages {fmt_bytes((seen.anon_huge_kb or 0) * 1024)}",
            inst.id, title=("THP is always" if not per else
                            f"THP is always for {', '.join(fmt_page(kb) for kb in sizes)} "
                            "pages (a per-size knob)")
            + (" (Redis turned it off for itself)" if off else ""),
            severity="info" if off else "warn")]


class MongoEngine(Engine):
    """MongoDB: no static pages; THP per version (>= 8.0: always, defrag defer+madvise,
    max_ptes_none 0; <= 7.0: never). Its needs join the host's one THP plan."""
    name = "mongodb"
    description = "MongoDB (THP guidance: >= 8.0 always + defer+madvise; <= 7.0 never)"
    process_names = ("mongod",)
    codes = MONGO_CODES

    def discover(self, host: HostFacts, procs: ProcTable, targets: Targets) -> list[Instance]:
        return _discover(self, host, procs, r"--port[= ](\d+)", lambda p: "27017",
                         r"db version v(\S+)", lambda p: "mongodb")

    def uses_pool(self, inst: Instance, profile: Profile) -> bool:
        return False

    @staticmethod
    def modern(inst: Instance) -> bool | None:
        v = _vt(inst.version)
        return None if not v else v >= (8, 0)

    @staticmethod
    def legacy_arch(inst: Instance) -> str | None:
        """The architecture when it is one where MongoDB >= 8.0 keeps the legacy TCMalloc
        (ppc64le, s390x: MONGO8_PLATFORMS); None on x86-64, arm64 or when unread."""
        arch = getattr(inst.state, "arch", None)
        return arch if arch and arch not in TCMALLOC_ARCHES else None

    def thp_needs(self, inst: Instance, profile: Profile) -> dict[str, tuple[set[str], str]]:
        m = self.modern(inst)
        if m is None:
            return {}
        if m and (arch := self.legacy_arch(inst)):
            return {"enabled": ({"never", "madvise"},
                                f"{inst.id}: MongoDB >= 8.0 on {arch} keeps the legacy "
                                "TCMalloc and wants THP off (madvise: it never asks)")}
        if m:
            return {"enabled": ({"always"}, f"{inst.id}: MongoDB >= 8.0 wants THP always"),
                    "defrag": ({"defer+madvise"},
                               f"{inst.id}: MongoDB >= 8.0 wants defrag defer+madvise")}
        return {"enabled": ({"never", "madvise"},
                            f"{inst.id}: MongoDB <= 7.0 wants THP off (madvise: it never asks)")}

    def findings(self, inst: Instance, host: HostFacts, profile: Profile) -> list[Finding]:
        t = host.thp
        m = self.modern(inst)
        if m is None:
            return [MONGO_CODES["mongodb.version.unknown"](
                "THP advice differs: >= 8.0 always, <= 7.0 never.", "", inst.id)]
        f = []
        legacy = self.legacy_arch(inst) if m else None
        if m and not legacy:
            ptes = t.khugepaged.get("max_ptes_none")
            bad = [f"{k}={v}" for k, v, want in (("enabled", t.enabled.value, "always"),
                                                 ("defrag", t.defrag.value, "defer+madvise"))
                   if v != want]
            if ptes not in (None, 0):
                bad.append(f"khugepaged/max_ptes_none={ptes}")
            f.append(MONGO_CODES["mongodb.thp"](
                "Its TCMalloc uses per-CPU caches backed by THP: enabled=always, "
                "defrag=defer+madvise, khugepaged max_ptes_none=0 (the last is not set by "
                "hpadvise: echo 0 > /sys/kernel/mm/transparent_hugepage/khugepaged/"
                "max_ptes_none).", (", ".join(bad) or "as advised") + (
                    "" if getattr(inst.state, "arch", None) else "; its architecture was not "
                    "read: this holds on x86-64 and arm64 only"), inst.id,
                title=("THP is not" if bad else "THP") + " as MongoDB >= 8.0 wants it",
                source=MONGO8, severity="warn" if bad else "ok"))
        else:
            ok = t.enabled.value in ("never", "madvise")
            f.append(MONGO_CODES["mongodb.thp"](
                f"MongoDB >= 8.0 on {legacy} keeps the legacy TCMalloc, which performs worse "
                "with THP; disable it." if legacy else
                "MongoDB before 8.0 performs worse with THP; disable it.",
                f"enabled={t.enabled.value}" + (f"; runs as {legacy}" if legacy else ""),
                inst.id,
                title=f"THP enabled={t.enabled.value} " + ("suits" if ok else "does not suit")
                + (f" MongoDB >= 8.0 on {legacy}" if legacy else " MongoDB <= 7.0"),
                source=MONGO8_PLATFORMS if legacy else MONGO7, severity="ok" if ok else "warn"))
        return f
