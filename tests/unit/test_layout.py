"""The package's imports run one way: no module imports, even lazily inside a function, one
that imports it back, directly or around a circle (imports for type checking only excepted);
the core's stages (hpadvise.STAGES, one package each) import only from themselves and the
stages before them, type-checking imports included. Read from the source with ast; the
top-level folders map to their import names as pyproject.toml's package-dir maps them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
PACKAGES = {"advisor": "hpadvise", "plugins": "hpadvise.plugins",
            "benchmarks": "hpadvise.benchmarks"}


def modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for top, name in PACKAGES.items():
        for f in (REPO / top).rglob("*.py"):
            parts = [p for p in f.relative_to(REPO / top).with_suffix("").parts
                     if p != "__init__"]
            out[".".join([name, *parts])] = (f, f.name == "__init__.py")
    return out


def graph(mods: dict[str, tuple[Path, bool]], typing: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body (`typing`: and in its
    type-checking blocks)."""
    out: dict[str, set[str]] = {m: set() for m in mods}
    for mod, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []  # for the type checker only: never run
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    here = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    here = here[:len(here) - node.level + 1]
                    base = ".".join(here + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    if target in mods:
                        out[mod].add(target)
                    elif base in mods:
                        out[mod].add(base)
            elif isinstance(node, ast.Import):
                out[mod].update(a.name for a in node.names if a.name in mods)
        out[mod].discard(mod)
    return out


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_import_circle():
    g = graph(modules())
    assert sum(map(len, g.values())) > 200  # the graph was read, not empty
    assert circles(g) == [], "\n".join(
        " <-> ".join(c) + ": " + "; ".join(f"{m} imports {sorted(g[m] & set(c))}" for m in c)
        for c in circles(g))


def test_the_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def stage_of(mod: str) -> int | None:
    """A core module's stage (its index in hpadvise.STAGES); None outside the core's stages."""
    from hpadvise import STAGES
    parts = mod.split(".")
    if parts[0] != "hpadvise" or len(parts) < 2 or parts[1] not in STAGES:
        return None
    return STAGES.index(parts[1])


def upward(g: dict[str, set[str]]) -> list[str]:
    """Imports from a stage to a later one."""
    return sorted(f"{m} -> {t}" for m, ts in g.items() for t in ts
                  if stage_of(m) is not None and stage_of(t) is not None
                  and stage_of(t) > stage_of(m))


def test_stages_import_only_their_own_and_earlier_ones():
    mods = modules()
    g = graph(mods, typing=True)
    staged = [m for m in mods if stage_of(m) is not None]
    assert len(staged) > 60  # the stages were read
    assert upward(g) == []


def test_every_core_module_is_in_a_stage():
    from hpadvise import STAGES
    flat = sorted(p.name for p in (REPO / "advisor").glob("*.py") if p.name != "__init__.py")
    assert flat == [], "a module of the core belongs in one of the stages' packages"
    dirs = sorted(p.name for p in (REPO / "advisor").iterdir()
                  if p.is_dir() and (p / "__init__.py").exists())
    assert sorted(STAGES) == dirs


def test_the_checker_finds_an_upward_import():
    assert upward({"hpadvise.kit.sizing": {"hpadvise.facts.host"},
                   "hpadvise.facts.host": {"hpadvise.kit.sizing"}}) == [
        "hpadvise.kit.sizing -> hpadvise.facts.host"]
    assert upward({"hpadvise.plugins.kv": {"hpadvise.cli.app"}}) == []  # not a stage


def test_no_file_over_400_lines():
    """The product's code (Python, its sysbench workload's Lua), its scripts, its tests and its
    lab's programs."""
    long = sorted(f"{p.relative_to(REPO)}: {n}" for top in (*PACKAGES, "scripts", "tests", "lab")
                  for p in (REPO / top).rglob("*") if p.suffix in (".py", ".lua", ".sh", ".c")
                  if (n := len(p.read_text().splitlines())) > 400)
    assert long == [], "split these along their seams"


FACES = ("hpadvise.api.face", "hpadvise.benchmarks.face")
# what validate and capture (benchmarks/) may import of the core: the engines' face and the
# one for planning, apply's preparation, the journal and what a run measures
BENCH_FACES = ("hpadvise.api.face", "hpadvise.act.face")


def imports_of(text: str, pkg: list[str] | None) -> list[tuple[int, str]]:
    """(line, module) of every import in `text`; relative ones resolved against `pkg`, the
    file's own package as parts (skipped where None): `from ..facts import host` leaves
    hpadvise.benchmarks as surely as an absolute import does."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level:
            if pkg:
                base = pkg[:len(pkg) - node.level + 1]
                out.append((node.lineno, ".".join(base + ([node.module] if node.module
                                                           else []))))
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [(node.lineno, node.module)] if node.module != "hpadvise" else \
                [(node.lineno, f"hpadvise.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def past_the_face(path: Path, own: str | None, faces: tuple[str, ...] = FACES) -> list[str]:
    """The imports of hpadvise in an engine's file that are neither a face nor its own
    package (`own`: hpadvise.plugins.postgres for plugins/postgres/*; None for one file)."""
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    pkg = None
    if own and path.is_relative_to(REPO):  # its package: own, and the folders below it
        top = REPO / ("benchmarks" if own == "hpadvise.benchmarks"
                      else "plugins/" + own.split(".")[2])
        pkg = own.split(".") + list(path.relative_to(top).parts[:-1])
    return [f"{where}:{line} imports {name}" for line, name in imports_of(path.read_text(), pkg)
            if name.split(".")[0] == "hpadvise" and name not in faces
            and not (own and (name == own or name.startswith(own + ".")))]


def test_engines_import_only_the_face():
    files = [(p, f"hpadvise.plugins.{p.relative_to(REPO / 'plugins').parts[0]}"
              if len(p.relative_to(REPO / "plugins").parts) > 1 else None)
             for p in (REPO / "plugins").rglob("*.py")]
    files.append((REPO / "tests/example/hpdemo.py", None))  # the worked example engine
    assert len(files) > 40
    assert [x for p, own in files for x in past_the_face(p, own)] == []


def test_benchmarks_reach_the_core_through_two_faces():
    files = sorted((REPO / "benchmarks").rglob("*.py"))  # its folders too, should it grow some
    assert len(files) > 15
    assert [x for p in files
            for x in past_the_face(p, "hpadvise.benchmarks", BENCH_FACES)] == []
    # and what they do import of the core, counted from the files: at most 4 modules
    used = {n.module for p in files for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.ImportFrom) and not n.level and n.module
            and n.module.startswith("hpadvise.") and not n.module.startswith(
                "hpadvise.benchmarks")}
    assert used == set(BENCH_FACES) and len(used) <= 4, used


def test_the_checker_resolves_relative_imports():
    text = "from .stats import x\nfrom ..facts import host\nfrom .. import kit\n"
    assert [n for _, n in imports_of(text, ["hpadvise", "benchmarks"])] == \
        ["hpadvise.benchmarks.stats", "hpadvise.facts", "hpadvise"]
    assert [n for _, n in imports_of("from ..conf import y\n",
                                     ["hpadvise", "plugins", "postgres", "validate"])] == \
        ["hpadvise.plugins.postgres.conf"]


def test_the_checker_finds_an_import_past_the_face(tmp_path):
    f = tmp_path / "engine.py"
    f.write_text("from hpadvise.api.face import Engine\nfrom hpadvise.facts import host\n"
                 "def f():\n    from hpadvise.planning.pipeline import inspect\n")
    assert past_the_face(f, None) == ["engine.py:2 imports hpadvise.facts",
                                      "engine.py:4 imports hpadvise.planning.pipeline"]


def test_the_schemas_sit_in_a_folder_of_their_own():
    """Every JSON output's schema is in advisor/schemas (hpadvise/schemas installed), one per
    command that has --json, and nothing else of the core's is a loose data file."""
    loose = sorted(str(p.relative_to(REPO)) for p in (REPO / "advisor").rglob("*.json")
                   if p.parent.name != "schemas")
    assert not loose, f"schemas outside advisor/schemas: {loose}"
    names = sorted(p.name for p in (REPO / "advisor" / "schemas").glob("*.json"))
    assert len(names) >= 11 and all(n.endswith("-schema.json") for n in names), names
    from importlib import resources
    installed = resources.files("hpadvise") / "schemas" / "check-schema.json"
    assert json.loads(installed.read_text())["properties"]["schema_version"]["const"] == 1
