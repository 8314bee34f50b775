"""check, snapshot and k8s: what is on this host and what it needs; they change nothing."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from ..kit.errors import InputError
from .app import app
from .common import complete_engines, no_dsn_offline
from .common import (CheckFormat, CheckOutput, FailOn, Format, Format2, JsonOpt, OutputOpt, deliver,
                     emit, fmt_of, format_opt, targets)

K8sFormat = format_opt(Format2, "table (the YAML to paste) or json.")


class Manifest(str, Enum):
    resources = "resources"
    operator = "operator"
    daemonset = "daemonset"
from .common import console as make_console


@app.command()
def check(
    fmt: CheckFormat = Format.table,
    json_out: JsonOpt = False,
    output: CheckOutput = None,
    fail_on: Annotated[FailOn, typer.Option(help="Exit 1 when a finding is this severe or worse "
                                            "(for audit pipelines).", case_sensitive=False)]
    = FailOn.none,
    profile: Annotated[str, typer.Option(metavar="NAME|FILE", help="Policy: a shipped profile name or a .toml path.")]
    = "oltp",
    dsn: Annotated[Optional[list[str]], typer.Option(
        metavar="DSN", help="Connect to a server with this DSN (repeatable). Passwords are never printed.")]
    = None,
    db: Annotated[Optional[list[str]], typer.Option(
        autocompletion=complete_engines,
        metavar="ENGINE", help="Only these engines (repeatable, or comma-separated: "
                               "postgres,mysql; mariadb is mysql); default: every installed "
                               "engine.")] = None,
    root: Annotated[str, typer.Option(metavar="DIR", help="Read /proc, /sys and /etc under this directory "
                                      "(an `hpadvise snapshot`) instead of the live host.")]
    = "/",
    verbose: Annotated[bool, typer.Option("--verbose", "-v",
                                          help="Show sources and unreadable files.")] = False,
    measure_limits: Annotated[bool, typer.Option(
        "--measure-limits", help="Inside a container, where the hugetlb limits above its "
        "cgroup are out of sight: find them by faulting huge pages in a child process, up to "
        "what each instance still needs; it takes free unreserved pages only and frees them "
        "at once. Off by default: it touches the host's huge pages.")] = False,
):
    """Inspect the host and running databases; size the pools; recommend. Changes nothing
    (--measure-limits borrows free huge pages for a moment).

    Examples:

    \b
      hpadvise check
      hpadvise check --json --fail-on warn > audit.json
      hpadvise check --format prometheus --output /var/lib/prometheus/node-exporter/hpadvise.prom
      hpadvise check --pgdata /srv/pg/16/main      # plan before the first start
      hpadvise check --dsn 'postgresql://app@db1:5432/postgres'
      hpadvise check --pgdata /var/lib/postgresql/data --measure-limits   # in an init container
    """
    from ..planning.pipeline import inspect
    from ..facts.sysroot import SysRoot, snapshot_root

    from ..api.engines import registry
    import time
    started = time.monotonic()
    form = fmt_of(fmt, json_out, ("table", "json", "prometheus"))
    if measure_limits and root != "/":
        raise InputError("--measure-limits measures the live host's cgroups; it cannot read a "
                         "snapshot: leave out --root")
    no_dsn_offline(dsn, root)
    engines = registry.resolve(db)
    report = inspect(SysRoot(snapshot_root(root)), profile, targets(dsn, engines), engines,
                     measure_limits=measure_limits)
    if form == "json":
        from ..outputs.render import to_json
        emit(to_json(report, snapshot_root(root)) + "\n", output)
    elif form == "prometheus":
        from ..outputs.metrics import to_prometheus
        emit(to_prometheus(report, time.monotonic() - started, time.time()), output)
    elif output:
        import io

        from ..outputs.render import render
        buf = io.StringIO()
        render(report, make_console(file=buf), verbose)
        emit(buf.getvalue(), output)
    else:
        from ..outputs.render import render
        render(report, make_console(), verbose)
    for e in report.errors:
        print(f"hpadvise: error: {e}", file=sys.stderr)
    if report.errors:
        raise typer.Exit(2)
    if fail_on != FailOn.none:
        from ..api.engines import SEVERITIES
        from ..kit.sizing import counted
        worst = SEVERITIES.index(fail_on.value)
        tripped = [f for f in report.findings if SEVERITIES.index(f.severity) >= worst]
        if tripped:  # say which, so that a pipeline's log shows why it failed
            shown = "; ".join(f"{f.severity} {f.code}" + (f" ({f.instance})" if f.instance
                                                          else "") for f in tripped[:5])
            more = f" and {len(tripped) - 5} more" if len(tripped) > 5 else ""
            print(f"hpadvise: --fail-on {fail_on.value}: {counted(len(tripped), 'finding')} at "
                  f"{fail_on.value} or worse: {shown}{more}", file=sys.stderr)
            raise typer.Exit(1)


@app.command()
def snapshot(
    directory: Annotated[str, typer.Argument(help="Where to write the captured tree.")],
    with_environ: Annotated[bool, typer.Option(
        "--with-environ", help="Also keep the processes' environments (values of "
        "secret-looking names removed); a JVM's JAVA_TOOL_OPTIONS live there.")] = False,
):
    """Capture every file `check` reads into DIRECTORY, for offline audits (`check --root`)
    and test fixtures. The directory is readable by you only; passwords in command lines,
    option files and DSNs are replaced by ***; environments are left out unless asked for.

    Example: hpadvise snapshot /tmp/host-a && hpadvise check --root /tmp/host-a"""
    from ..kit.files import new_directory
    from ..planning.pipeline import inspect
    from ..outputs.snapshot import write_snapshot
    from ..facts.sysroot import SysRoot

    new_directory(directory, "snapshot directory")
    sr = SysRoot("/", record=True)
    inspect(sr, targets=targets())
    n = write_snapshot(sr, directory, environ=with_environ)
    print(f"wrote {n} files to {directory} (readable by you only; secrets replaced by ***"
          + ("" if with_environ else "; environments left out: --with-environ keeps them")
          + ")")


@app.command("k8s")
def k8s(
    db: Annotated[Optional[list[str]], typer.Option(
        autocompletion=complete_engines,
        metavar="ENGINE", help="Only these engines (repeatable, or comma-separated: "
                               "postgres,mysql; mariadb is mysql); default: every installed "
                               "engine.")] = None,
    instance: Annotated[Optional[list[str]], typer.Option(
        metavar="ID", help="Only this instance: ID as `check` shows it, data directory, port or a "
             "Debian cluster's name, 15/main (repeatable).")] = None,
    pods: Annotated[int, typer.Option(help="Pods of this kind a node must hold.")] = 1,
    manifest: Annotated[Manifest, typer.Option(
        help="resources: each container's resources block; operator: the engine's operator "
             "manifest (PostgreSQL: a CloudNativePG Cluster); daemonset: a DaemonSet that "
             "runs check on every node (Prometheus textfile).")] = Manifest.resources,
    image: Annotated[str, typer.Option(
        metavar="IMAGE", help="--manifest daemonset: an image with hpadvise installed.")]
        = "hpadvise:latest",
    profile: Annotated[str, typer.Option(metavar="NAME|FILE", help="Profile name or .toml path.")] = "oltp",
    dsn: Annotated[Optional[list[str]], typer.Option(
        metavar="DSN", help="Connect to a server with this DSN (repeatable).")] = None,
    root: Annotated[str, typer.Option(metavar="DIR", help="Read /proc, /sys and /etc under "
                                      "this directory (an `hpadvise snapshot`).")] = "/",
    fmt: K8sFormat = Format2.table,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
):
    """Kubernetes resources for each instance on huge pages: hugepages-2Mi or hugepages-1Gi
    with request = limit = its exact pages, memory for the rest of the server, the server's
    settings, and the node pool for N such pods. An engine's option that names an instance
    (--pgdata DIR) gives that instance's resources, as --instance does. Changes nothing.

    Examples:

    \b
      hpadvise k8s --db postgres
      hpadvise k8s --pgdata /srv/pg/16/main --pods 3 --output cluster-resources.yaml
      hpadvise k8s --db postgres --json | jq '.[].resources.limits'
      hpadvise k8s --db postgres --manifest operator > cluster.yaml
      hpadvise k8s --manifest daemonset --image registry.example/hpadvise:0.1.0
    """
    from ..outputs import k8s as k8s_mod
    from ..planning.pipeline import inspect, select
    from ..facts.procs import ProcTable
    from ..facts.sysroot import SysRoot

    if pods < 1:
        raise InputError(f"--pods {pods}: a node holds at least 1 pod; give 1 or more")
    from ..api.engines import registry
    from ..facts.sysroot import snapshot_root
    form = fmt_of(fmt, json_out)
    if manifest == Manifest.daemonset:  # the same for every node: nothing to inspect
        from ..kit.yamlout import dump
        if not image.strip() or any(c.isspace() for c in image):
            raise InputError(f"--image {image!r}: not an image reference; give one such as "
                             "registry.example/hpadvise:0.1.0")
        ds = k8s_mod.daemonset(image)
        deliver(form, ds, lambda: print(dump(ds), end=""), output)
        return
    no_dsn_offline(dsn, root)
    sr = SysRoot(snapshot_root(root))
    engines = registry.resolve(db)
    named = targets(dsn, engines)
    report = inspect(sr, profile, named, engines)
    for e in report.errors:
        raise InputError(e)
    wanted = report.instances
    # the instances an engine option names (`--pgdata DIR`) stand for --instance when none
    # is given: the resources of the cluster asked about, not of every instance here
    instance = instance or [v for _, opt in registry.options("k8s") if opt.names_instances
                            for v in named.get(opt.key)]
    if instance:
        wanted = select(report, None, instance)
    procs = ProcTable(sr)
    docs = [p for i in wanted if (p := k8s_mod.plan(report, procs, i, pods))]
    unsized = [i.id for i in wanted if i.demand is None
               and getattr(report.placements.get(i.id), "status", None) == "unsized"]
    if not docs and unsized:
        raise InputError(f"cannot size {', '.join(unsized)} as this user: run as root or as "
                         "the server's owner")
    pool_free = [i.id for i in wanted if i.demand is None  # THP serves them, not a pool
                 and getattr(report.placements.get(i.id), "status", None) == "thp"]
    if not docs and pool_free:
        one = len(pool_free) == 1
        raise InputError(f"{', '.join(pool_free)} {'takes' if one else 'take'} no static "
                         f"huge pages (THP serves {'it' if one else 'them'}): no hugepages-* "
                         "resources to give; `hpadvise check` shows the THP advice")
    if not docs:
        raise InputError("no instance with a huge page demand found; `hpadvise check` shows "
                         "what is there (a stopped server: its engine's option, listed by "
                         "`hpadvise k8s --help`)")
    if manifest == Manifest.operator:
        none = [p["instance"] for p in docs if not p["operator"]]
        if none:
            raise InputError(f"no operator manifest for {', '.join(none)} (its engine has "
                             "none); use --manifest resources")
        show = k8s_mod.operator_yaml
    else:
        show = k8s_mod.to_yaml
    deliver(form, docs, lambda: print("---\n".join(show(p) for p in docs), end=""), output)
