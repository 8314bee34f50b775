"""The engine plugin API: the contract between the core and every engine.

An engine (PostgreSQL, MySQL, a JVM ...) is declarations plus hooks; only `discover` is
required, every other hook has a safe default. docs/writing-an-engine.md walks through them
with a worked example. Built-in engines are registered exactly like third-party ones, through
the ``hpadvise.engines`` entry point group; a third party ships a package with an entry point
and nothing else::

    [project.entry-points."hpadvise.engines"]
    mydb = "mydb_hpadvise:MyDBEngine"

The core never branches on an engine's name: it asks the engine's objects (its instances'
demand and findings, its actions, its benchmark target). Engine modules are imported only when
the registry is first used, so ``hpadvise --help`` does not pay for database drivers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ..kit.findings import SEVERITIES, Codes, Finding  # noqa: F401  (part of the engine API)
from .model import (Change, Demand, EngineOption, Instance, Placement,  # noqa: F401
                    Targets)  # (the engine API)
from ..kit.secrets import redact_dsn  # noqa: F401  (part of the engine API)

if TYPE_CHECKING:
    from ..changes.actions import Action
    from ..facts.host import HostFacts
    from ..facts.procs import ProcTable
    from .profiles import Profile

def error_line(exc: BaseException, dsn: str | None = None, password: str | None = None) -> str:
    """A driver's error as one line that may be shown: at most 300 characters, the DSN
    redacted and its password removed wherever the driver echoed it."""
    text = " ".join((str(exc).strip() or type(exc).__name__).split())[:300]
    if dsn:
        text = text.replace(dsn, redact_dsn(dsn))
    return text.replace(password, "***") if password else text


class Engine:
    """Base class: subclasses declare `name`, `process_names`, `description` and implement
    `discover`; the other hooks have safe defaults (docs/writing-an-engine.md)."""

    name: ClassVar[str] = ""
    # Other names users know the engine by (`--db mariadb`).
    aliases: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""
    process_names: ClassVar[tuple[str, ...]] = ()
    # This engine's section in profiles: key -> (type, allowed values or None, default).
    profile_schema: ClassVar[dict[str, tuple]] = {}
    # Every finding code this engine raises, declared once (hpadvise.kit.findings.Codes).
    codes: ClassVar[Codes] = Codes()
    # The engine's own action classes by kind, for rebuilding them from the journal.
    action_kinds: ClassVar[tuple[type[Action], ...]] = ()
    # What apply changes on the engine's side, in a user's words (`hpadvise engines`, after
    # "pools and THP; "); empty: the generic sentence (engines without actions change nothing
    # in the server).
    applies: ClassVar[str] = ""
    # Benchmarks `validate` can run against this engine (empty: validate does not support it).
    benches: ClassVar[tuple[str, ...]] = ()
    # The engine `validate` benchmarks when --db is not given (the first engine that says so).
    validate_default: ClassVar[bool] = False
    # Command-line options the engine adds to the core's commands (EngineOption).
    options: ClassVar[tuple[EngineOption, ...]] = ()

    def discover(self, host: HostFacts, procs: ProcTable, targets: Targets) -> list[Instance]:
        raise NotImplementedError

    def reference_of(self, spec: dict) -> str | None:
        """The reference (a data directory ...) of the instance one of this engine's journaled
        actions changed: discovery finds it again when it is stopped (Targets.remembered)."""
        return None

    def needs_pages_at_start(self, inst: Instance) -> bool:
        """A stopped instance found but not named (Instance.found): whether it takes huge pages
        from the pool when it starts, so that the plan keeps them for it."""
        return False

    def takes_dsn(self, dsn: str) -> bool:
        """Whether a `--dsn` is this engine's (by its scheme): one that no engine named with
        --db takes is refused rather than ignored."""
        return False

    def findings(self, inst: Instance, host: HostFacts, profile: Profile) -> list[Finding]:
        return []

    def changes(self, inst: Instance, page_kb: int | None, host: HostFacts,
                profile: Profile) -> list[Change]:
        """Settings of the engine itself that the plan needs, given the chosen page size.
        page_kb None: the instance must not use huge pages (its cgroup cannot hold them)."""
        return []

    def held_back(self, inst: Instance, profile: Profile) -> str | None:
        """Why this instance will not take huge pages whatever apply does (a setting that
        keeps it off them comes from where hpadvise does not change it), or None. The plan
        then reserves nothing for it and restarts nothing."""
        return None

    def uses_pool(self, inst: Instance, profile: Profile) -> bool:
        """Whether this instance's demand goes into the static pools (a JVM on THP does not)."""
        return True

    def references(self, inst: Instance) -> tuple[str, ...]:
        """How users may name this instance besides its ID (`--instance`): a data
        directory, a port, a socket ... (a path matches by its real path)."""
        return ()

    def outlives_process(self, inst: Instance) -> bool:
        """Whether the instance's ID outlives its process (a port, a path, a name), so that the
        same server is found under it again after a restart. An ID that names a process (its
        PID) does not: an apply's record of it is not kept for a "stopped" instance once the
        process is gone (recorded.absent), as its successor is a new instance."""
        return True

    def thp_needs(self, inst: Instance, profile: Profile) -> dict[str, tuple[set[str], str]]:
        """THP knob values this instance can live with: knob -> (acceptable values, why).
        The plan resolves them against the profile and the other instances."""
        return {}

    def what_if(self, args: list[str], host: HostFacts, version: str | None,
                targets: Targets) -> Instance:
        """A planned instance with these settings (`hpadvise size ENGINE ARGS`): not running,
        its demand sized as for a running one, exactly where the engine's own binary can tell
        (and the Demand says which). `targets` holds the engine's own options given to size
        (e.g. which binaries to ask). Bad settings are an InputError."""
        from ..kit.errors import InputError
        can = [e.name for e in registry.all() if type(e).what_if is not Engine.what_if]
        raise InputError(f"{self.name}: sizing a planned configuration is not supported; "
                         f"engines that can: {', '.join(can)}")

    def operator_manifest(self, inst: Instance, resources: dict,
                          settings: dict[str, str]) -> dict | None:
        """A manifest for the engine's Kubernetes operator that carries the pod resources and
        the server's huge page settings (`hpadvise k8s --manifest operator`); None: none."""
        return None

    def huge_page_settings(self, inst: Instance, page_kb: int, host: HostFacts) -> dict[str, str]:
        """The server's own settings that put it on huge pages of page_kb, whatever it runs
        with now (for a deployment elsewhere: `hpadvise k8s`)."""
        return {}

    def advice(self, inst: Instance, changes: list[Change]) -> list[str]:
        """Things apply cannot do itself and tells the user instead (e.g. JVM flags)."""
        return []

    # ---- apply (hpadvise.changes.actions.Action objects, each naming its instance)
    def actions(self, inst: Instance, changes: list[Change]) -> list[tuple[Action, Any]]:
        """(action, value to set) for each of this instance's setting changes."""
        return []

    def restart_action(self, inst: Instance) -> Action | None:
        """An action restarting the instance and verifying it runs on huge pages, or None."""
        return None

    def action_from_spec(self, spec: dict) -> Action:
        """Rebuild one of this engine's actions from the journal (for rollback)."""
        for cls in self.action_kinds:
            if cls.kind == spec.get("kind"):
                return cls.from_spec(spec)
        from ..kit.errors import InputError
        raise InputError(f"the journal names a {self.name} action {spec.get('kind')!r} that "
                         "this version of the engine does not know")

    # ---- capture (a workload recorded for validate --replay)
    def capture(self, inst: Instance, out_dir: str, duration_s: int, journal_dir: str,
                base: bool, say, progress, yes: bool = False) -> dict:
        """Record the instance's statements into out_dir for duration_s seconds, every
        change journaled and put back at the end; returns what was recorded. `yes`: the
        user accepts that the statements also stay where the engine cannot keep them out."""
        from ..kit.errors import InputError
        raise InputError(f"capture does not support engine {self.name}")

    def capture_privacy(self, out_dir: str) -> str:
        return f"a statement log holds data: keep {out_dir} private"

    def not_running(self, ref: str) -> str | None:
        """Where `ref` names none of the instances found but one of this engine's that is
        stopped (its data directory): what is there, for the message that says so instead
        of "no instance"; None otherwise."""
        return None

    # ---- validate
    def bench_target(self, opts: Any) -> Any:
        """The server `validate` measures (hpadvise.benchmarks.target.BenchTarget): a scratch
        server it creates, or the running instance `opts.instance`."""
        from ..kit.errors import InputError
        raise InputError(f"validate does not support engine {self.name}")


class ServerEngine(Engine):
    """An engine whose instances are servers a Discovery class of its own finds, each with a
    typed state (a dataclass of the engine's package), and whose findings and held-back
    reason come from a module of its own. Subclasses set `discovery` (built with the
    connection timeout; `discover(host, procs, targets)`), `rules` (a module with
    `findings(inst, state, host)` and `held_back(state)`) and `state_type`, and may narrow
    `usable` (a state the rules can judge)."""

    discovery: ClassVar[Any] = None
    rules: ClassVar[Any] = None
    state_type: ClassVar[type] = object

    def __init__(self, connect_timeout: int = 3):
        self.connect_timeout = connect_timeout

    def discover(self, host: HostFacts, procs: ProcTable, targets: Targets) -> list[Instance]:
        return self.discovery(self.connect_timeout).discover(host, procs, targets)

    def usable(self, inst: Instance, state: Any) -> bool:
        return True

    def state(self, inst: Instance) -> Any:
        """The instance's own state where the engine's rules can judge it; else None."""
        s = inst.state
        return s if isinstance(s, self.state_type) and self.usable(inst, s) else None

    def findings(self, inst: Instance, host: HostFacts, profile: Profile) -> list[Finding]:
        s = self.state(inst)
        return self.rules.findings(inst, s, host) if s is not None else []

    def held_back(self, inst: Instance, profile: Profile) -> str | None:
        s = self.state(inst)
        return self.rules.held_back(s) if s is not None else None


class Registry:
    """Engines from the entry point group, loaded on first use. Tests may `register` a
    throwaway engine and `unregister` it."""

    GROUP = "hpadvise.engines"

    def __init__(self):
        self._engines: dict[str, type[Engine]] | None = None

    def _load(self) -> dict[str, type[Engine]]:
        if self._engines is None:
            self._engines, self._origin = {}, {}
            from ..facts.dists import entry_points
            for ep in entry_points(self.GROUP):
                cls = ep.load()
                self._engines[cls.name or ep.name] = cls
                self._origin[cls.name or ep.name] = ep.dist
        return self._engines

    def origin(self, name: str) -> str:
        """The distribution that registered an engine ("hpadvise" for the built-in ones)."""
        self._load()
        return self._origin.get(name, "registered at runtime")

    def describe(self) -> list[dict]:
        """What each installed engine supports, for `hpadvise engines`."""
        out = []
        for eng in self.all():
            cls = type(eng)
            if cls.action_kinds:
                apply = "pools and THP; " + (cls.applies or "sets its settings, restarts (with "
                                             "--restart) and verifies")
            elif cls.advice is not Engine.advice:
                apply = "pools and THP; prints what to change in the server and where"
            else:
                apply = "pools and THP only; nothing in the server"
            origin = self.origin(eng.name)
            out.append({"name": eng.name, "description": eng.description,
                        "origin": "built-in" if origin == "hpadvise" else origin,
                        "processes": list(eng.process_names), "check": True,
                        "apply": apply, "validate": list(cls.benches),
                        "finding_codes": len(cls.codes),
                        "profile_keys": sorted({**ENGINE_KEYS, **cls.profile_schema})})
        return out

    def options(self, command: str) -> list[tuple[str, EngineOption]]:
        """(engine name, option) for every engine option on `command`."""
        return [(n, o) for n, cls in sorted(self._load().items()) for o in cls.options
                if command in o.commands]

    def names(self) -> list[str]:
        return sorted(self._load())

    def get(self, name: str) -> Engine:
        engines = self._load()
        if name not in engines:
            from ..kit.errors import InputError
            raise InputError(f"no engine named {name!r} is installed "
                             f"(installed: {', '.join(sorted(engines)) or 'none'})")
        return engines[name]()

    def resolve(self, given: list[str] | None, what: str = "--db") -> list[str] | None:
        """`--db` values as users write them (repeatable, comma-separated, any case, aliases,
        `all`) -> engine names; None for every engine. Unknown names are an InputError."""
        engines = self._load()
        alias = {a: n for n, cls in engines.items() for a in (n, *cls.aliases)}
        out: list[str] = []
        for part in (p.strip().lower() for g in given or () for p in g.split(",")):
            if not part:
                continue
            if part == "all":
                return None
            if part not in alias:
                from ..kit.errors import InputError
                raise InputError(f"{what} {part}: no such engine; installed: "
                                 f"{', '.join(sorted(alias))}, or all")
            if alias[part] not in out:
                out.append(alias[part])
        return out or None

    def all(self) -> list[Engine]:
        return [cls() for _, cls in sorted(self._load().items())]

    def profile_schemas(self) -> dict[str, dict[str, tuple]]:
        return {name: {**ENGINE_KEYS, **cls.profile_schema} for name, cls in self._load().items()}

    def register(self, cls: type[Engine]) -> None:
        self._load()[cls.name] = cls

    def unregister(self, name: str) -> None:
        self._load().pop(name, None)
        self._origin.pop(name, None)


registry = Registry()


# Keys every engine's profile section has, read by the core: `thp`, the most THP the engine's
# processes should get (madvise: only what they ask for; inherit: the host's mode). Where the
# host-wide mode gives more, the plan gives them a THP mode of their own (thp_policy.py).
ENGINE_KEYS: dict[str, tuple] = {"thp": (str, ("inherit", "madvise", "never"), "inherit")}


def action_from_spec(spec: dict) -> Action:
    """Rebuild an action from the journal: the core's kinds, or {"engine": name}'s own."""
    from ..changes.actions import KINDS
    from ..kit.errors import InputError
    from ..changes.process_thp import ProcessThp  # an engine's restart in a THP mode of its own
    from ..changes.scratch import ScratchDir  # validate's: a kind of its own, beside the host's
    if "engine" in spec:
        return registry.get(spec["engine"]).action_from_spec(spec)
    if spec.get("kind") == ProcessThp.kind:  # an engine's restart, wrapped
        return ProcessThp(action_from_spec(spec["restart"]), spec.get("pages", True))
    cls = {**KINDS, ScratchDir.kind: ScratchDir}.get(spec.get("kind", ""))
    if cls is None:
        raise InputError(f"journal names an unknown action kind {spec.get('kind')!r}")
    return cls.from_spec(spec)


def catalog() -> dict:
    """Every declared finding code -> (who declares it: "core" or an engine name, the Code)."""
    from ..kit.findings import CORE
    from ..facts.sysctls import CODES  # each declared kernel setting's finding
    from ..facts.thp_knobs import CODES as THP_CODES  # each THP file's
    out: dict = {c.code: ("core", c) for c in (*CORE.values(), *CODES.values(),
                                               *THP_CODES.values())}
    for eng in registry.all():
        for c in eng.codes.values():
            if c.code in out:
                raise ValueError(f"finding code {c.code} declared by {out[c.code][0]} and "
                                 f"{eng.name}")
            out[c.code] = (eng.name, c)
    return dict(sorted(out.items()))
