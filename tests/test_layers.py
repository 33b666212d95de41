"""The package's import structure: Python's own import graph of ``indexer``
(every ``import`` and ``from ... import`` anywhere in a module, those inside
functions included) has no cycle; imports go only down the layers
(pyproject.toml's import-linter contracts say the same to ``lint-imports``);
and an import left inside a function says why on its line."""

from __future__ import annotations

import ast
import io
import tokenize
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Each root package and the folder it is packaged from (pyproject.toml).
PACKAGES = {"indexer": ROOT / "indexer", "session_index_web": ROOT / "datasette-plugins"}
# The import-linter contracts (pyproject.toml): the layers, top to bottom (a
# module may import from its own layer and those below it), and the upward
# imports the layers contract lets through while the work that removes them
# is in flight.
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
LAYERS_CONTRACT = next(c for c in CONTRACTS["contracts"] if c["type"] == "layers")
LAYERS = tuple(LAYERS_CONTRACT["layers"])
IGNORED = {tuple(i.split(" -> ")) for i in LAYERS_CONTRACT.get("ignore_imports", ())}


def modules(packages=PACKAGES) -> dict[str, Path]:
    """Every module of the packages: its dotted name -> its file."""
    found = {}
    for package, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            if ".venv" in path.parts:
                continue
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imports(name: str, path: Path, known) -> list[tuple[str, int, bool]]:
    """The modules of ``known`` that module ``name`` imports: (module, line,
    not one of the module's own statements: inside a function, say), as Python resolves each statement (``from
    a import b`` imports a.b when it is a module, else a; relative imports
    from the module's package)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        nested = id(node) not in top
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known_prefix(alias.name, known)
                if target:
                    found.append((target, node.lineno, nested))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            for alias in node.names:
                target = (f"{base}.{alias.name}" if f"{base}.{alias.name}" in known
                          else _known_prefix(base, known))
                if target:
                    found.append((target, node.lineno, nested))
    return found


def _known_prefix(dotted: str, known) -> str | None:
    """The module ``import dotted`` runs last that is one of ``known``."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in known:
            return ".".join(parts[:n])
    return None


def graph(packages=PACKAGES) -> dict[str, dict[str, tuple[int, bool]]]:
    """module -> {module it imports: (the line of the first such import, nested)}."""
    found = modules(packages)
    edges: dict[str, dict[str, tuple[int, bool]]] = {m: {} for m in found}
    for name, path in found.items():
        for target, line, nested in imports(name, path, found):
            if target != name:
                edges[name].setdefault(target, (line, nested))
    return edges


def cycles(edges) -> list[list[str]]:
    """The import cycles of ``edges``: each strongly connected component of
    more than one module, as one cycle through it (Tarjan, iteratively)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(_cycle_through(set(component), edges))
    return found


def _cycle_through(component: set, edges) -> list[str]:
    """A shortest cycle from the component's first module back to it."""
    first = min(component)
    paths = {first: [first]}
    queue = [first]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v]):
            if w == first:
                return paths[v] + [first]
            if w in component and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    raise AssertionError(component)


def layer(module: str) -> int | None:
    """The module's layer (0 the top), None for one outside them (indexer,
    indexer.__main__)."""
    for i, name in enumerate(LAYERS):
        if module == name or module.startswith(name + "."):
            return i
    return None


def upward(edges) -> list[tuple[str, str, int]]:
    """Each import of a module from a layer above its own: (importer,
    imported, line)."""
    found = []
    for source, targets in sorted(edges.items()):
        for target, (line, _) in sorted(targets.items()):
            low, high = layer(source), layer(target)
            if low is not None and high is not None and high < low:
                found.append((source, target, line))
    return found


def test_the_import_graph_has_no_cycle():
    """(but through an upward import the layers contract names, IGNORED)"""
    edges = {source: {t: v for t, v in targets.items() if (source, t) not in IGNORED}
             for source, targets in graph().items()}
    found = cycles(edges)
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_imports_go_down_the_layers_only():
    """None but those the layers contract names (each must go with its import)."""
    assert {(source, target) for source, target, _ in upward(graph())} == IGNORED


def test_the_layers_are_the_packages():
    """Every subpackage of indexer is a layer (indexer.cli the top,
    indexer.sql the bottom), and the plugin is one."""
    subpackages = {f"indexer.{p.name}" for p in PACKAGES["indexer"].iterdir()
                   if (p / "__init__.py").exists()}
    assert set(LAYERS) == subpackages | {"indexer.sql", "session_index_web"}
    assert (LAYERS[0], LAYERS[-1]) == ("indexer.cli", "indexer.sql")


def test_the_cycle_finder_names_a_cycle(tmp_path):
    """The checks above can fail: a cycle made of function-level imports, and
    an upward import, are found and named."""
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg import b  # (why)\n")
    (package / "b.py").write_text("from .low import c\n")
    (package / "low" / "c.py").write_text("import os\n\n\ndef g():\n    import pkg.a\n")
    edges = graph({"pkg": package})
    assert edges["pkg.a"] == {"pkg.b": (2, True)}
    assert edges["pkg.b"] == {"pkg.low.c": (1, False)}
    assert cycles(edges) == [["pkg.a", "pkg.b", "pkg.low.c", "pkg.a"]]
    assert cycles({"x": {"y": (1, False)}, "y": {}}) == []


def test_an_upward_import_is_named():
    edges = {"indexer.chain.walk": {"indexer.index.views": (12, False)},
             "indexer.index.views": {"indexer.chain.definitions": (3, False)},
             "indexer.__main__": {"indexer.cli.entry": (3, False)}}
    assert upward(edges) == [("indexer.chain.walk", "indexer.index.views", 12)]


def function_imports(path: Path) -> list[tuple[int, str]]:
    """Each import statement inside a function of the file, with the text of
    its last line's comment ('' for none)."""
    source = path.read_text()
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string
    tree = ast.parse(source, str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in ast.walk(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    found.append((child.lineno, comments.get(child.end_lineno, "")))
    return sorted(set(found))


def test_every_import_inside_a_function_says_why():
    """An import made inside a function (start-up time, an optional
    dependency, a worker process's own) has a one-line reason on its line."""
    missing = [f"{path.relative_to(ROOT)}:{line}" for path in modules().values()
               for line, comment in function_imports(path)
               if len(comment.lstrip("# ").strip("() ")) < 8]
    assert missing == []


def test_a_function_import_without_a_reason_is_found(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    import os\n    import sys  # (start-up time)\n"
                    "    from json import (\n        dumps)  # (the worker's)\n")
    assert function_imports(path) == [(2, ""), (3, "# (start-up time)"),
                                      (4, "# (the worker's)")]


@pytest.mark.parametrize("module", ["indexer.sql"])
def test_the_bottom_imports_nothing_of_the_package(module):
    assert graph()[module] == {}
