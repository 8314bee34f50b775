"""The package's imports run one way: no module imports, even lazily inside a function, one
that imports it back, directly or around a circle (imports for type checking only excepted).
Read from the source with ast; the top-level folders map to their import names as
pyproject.toml's package-dir maps them."""

from __future__ import annotations

import ast
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


def graph(mods: dict[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body."""
    out: dict[str, set[str]] = {m: set() for m in mods}
    for mod, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
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
