"""The package's layout rules (CONTRIBUTING.md), checked over the import graph of app/.

Imports go one way: the views, then the extension's state, then the helpers (schemas, HTTP,
auth and its rate limits, metrics), then the catalogue of errors, the store, and the settings. The
store never imports Flask nor reads a request's WSGI details; the worker imports nothing of the
service; no module reaches into another concern's private names. And no import loop: not among
app's top-level entries, not among modules, counting every import (function-level and
TYPE_CHECKING ones too).
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

#: Each concern's layer: a module may import its own layer and the ones below (higher numbers).
LAYERS = {
    "app": 0,
    "app.plants": 0,
    "app.health": 0,
    "app.server": 0,
    "app.extension": 1,
    "app.schemas": 2,
    "app.http": 2,
    "app.auth": 2,
    "app.metrics": 2,
    "app.webhooks": 2,
    #: The watch of the feed: the views use it; it uses the store, never a view nor the server.
    "app.watch": 2,
    "app.errors": 3,
    "app.store": 4,
    "app.settings": 5,
    "app.telemetry": 6,
    #: Libraries beyond their public interface: imports nothing of the service.
    "app.compat": 8,
}
WORKER = "app.server.worker"


def module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def concern(module: str) -> str:
    """The top-level entry of app/ that `module` belongs to (the package itself for app/__init__)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def imports(path: Path) -> list[tuple[str, list[str], int]]:
    """Every import of the file, at any depth: (module, the names taken from it, line)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import (this package imports absolutely)"
            found.append((node.module or "", [alias.name for alias in node.names], node.lineno))
    return found


MODULES = {module_name(path): path for path in sorted(APP.rglob("*.py"))}


def test_every_top_level_entry_has_a_layer():
    entries = {concern(name) for name in MODULES}
    assert entries == set(LAYERS), (
        "a new top-level entry of app/ needs its place in LAYERS and CONTRIBUTING.md"
    )
    top_level = [
        entry
        for entry in APP.iterdir()
        if not entry.name.startswith(("_", ".")) or entry.name == "__init__.py"
    ]
    assert 12 <= len(top_level) <= 16, sorted(entry.name for entry in top_level)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_one_way(module):
    path, own = MODULES[module], concern(module)
    for imported, names, line in imports(path):
        if imported != "app" and not imported.startswith("app."):
            if own == "app.store":
                assert imported.split(".")[0] not in ("flask", "werkzeug"), (
                    f"{path}:{line}: the store imports {imported}"
                )
            continue
        target = concern(imported)
        where = f"{path}:{line}: {module} imports {imported}"
        if module.startswith(WORKER):
            assert imported.startswith(WORKER), f"{where}: the worker stands apart from the service"
            continue
        assert LAYERS[target] >= LAYERS[own], f"{where}: against the direction of imports"
        if target != own:
            private = [name for name in names if name.startswith("_")]
            assert not private, f"{where}: private names of another concern: {private}"
            assert not any(part.startswith("_") and part != "__init__" for part in imported.split(".")), where


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Which of `modules` each one imports, by any import statement at any depth. `from package
    import name` imports the submodule when `name` is one, and the package's own names otherwise."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        graph[module] = set()
        for imported, names, _ in imports(path):
            submodules = {f"{imported}.{name}" for name in names} & modules.keys()
            graph[module] |= submodules or ({imported} & modules.keys())
    return graph


def loops(graph: Mapping[str, set[str]]) -> set[frozenset[str]]:
    """The graph's import loops: each set of nodes that reach one another (Tarjan's strongly
    connected components of more than one node, or a node that imports itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = {stack.pop()}
            while node not in component:
                component.add(stack.pop())
            if len(component) > 1 or node in graph.get(node, ()):
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def concern_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The module graph seen from app's top-level entries: an edge for every import across two."""
    entries: dict[str, set[str]] = {}
    for module, targets in graph.items():
        entries.setdefault(concern(module), set()).update(
            concern(target) for target in targets if concern(target) != concern(module)
        )
    return entries


def describe(loop: frozenset[str], graph: Mapping[str, set[str]]) -> list[str]:
    return sorted(f"{module} -> {target}" for module in loop for target in graph[module] & loop)


GRAPH = import_graph(MODULES)


def test_no_import_loop_among_modules():
    found = loops(GRAPH)
    assert not found, [describe(loop, GRAPH) for loop in found]


def test_no_import_loop_among_top_level_entries():
    entries = concern_graph(GRAPH)
    found = loops(entries)
    assert not found, [describe(loop, entries) for loop in found]


def test_the_loop_check_sees_function_level_and_type_checking_imports(tmp_path):
    """A loop closed only by a function-level import and one under TYPE_CHECKING is found, and a
    package's `from package import submodule` is not read as a loop through the package."""
    files = {
        "app.x.a": "def f():\n    from app.x.b import g\n",
        "app.x.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.y import c\n",
        "app.y.c": "import app.x.a\n",
        "app.y": "from app.y import c\n",
    }
    modules = {}
    for name, text in files.items():
        modules[name] = tmp_path / f"{name}.py"
        modules[name].write_text(text)
    graph = import_graph(modules)
    assert graph["app.y"] == {"app.y.c"}
    assert loops(graph) == {frozenset({"app.x.a", "app.x.b", "app.y.c"})}
    assert loops(concern_graph(graph)) == {frozenset({"app.x", "app.y"})}
    assert loops({"app.z": {"app.z"}}) == {frozenset({"app.z"})}


#: File names that more than one package of app/ has, each saying one thing: the package entry;
#: a store backend's own parts (store.py, feed.py, endpoints.py: one each per backend); a resource's
#: views and its schemas (webhooks.py).
SHARED_FILE_NAMES = {"__init__.py", "store.py", "feed.py", "endpoints.py", "webhooks.py"}


def test_a_file_name_says_one_thing():
    """A reader who meets `errors.py` or `tickets.py` knows which one it is."""
    names = Counter(path.name for path in MODULES.values())
    twice = {name for name, count in names.items() if count > 1}
    assert twice <= SHARED_FILE_NAMES, sorted(twice - SHARED_FILE_NAMES)


def test_a_class_name_says_one_thing():
    """No two of app's module-level classes share a name."""
    classes = Counter(
        node.name
        for path in MODULES.values()
        for node in ast.parse(path.read_text("utf-8")).body
        if isinstance(node, ast.ClassDef)
    )
    assert not [name for name, count in classes.items() if count > 1]


#: The longest a class of app/ may be, in lines: the style guide asks for about 150, and a class
#: past this has two concerns, each of which can be a class of its own.
MAX_CLASS_LINES = 160


def test_no_class_is_longer_than_the_bound():
    """Every class of app/, a nested one too, from its `class` line to its last."""
    long = {
        f"{module}.{node.name}": lines
        for module, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.ClassDef)
        and (lines := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_CLASS_LINES
    }
    assert not long, long


#: What only the serving side knows: the WSGI environ's keys and the server that runs the app.
SERVING_DETAILS = ("wsgi.", "SERVER_SOFTWARE", "REMOTE_ADDR", "gunicorn")


@pytest.mark.parametrize("module", sorted(name for name in MODULES if concern(name) == "app.store"))
def test_the_store_knows_nothing_of_how_it_is_served(module):
    """A store serves whatever process holds it: whether that process may serve it (the memory
    store from one process only) is the serving side's question (app/http/split_guard.py)."""
    text = MODULES[module].read_text("utf-8")
    found = [detail for detail in SERVING_DETAILS if detail in text]
    assert not found, f"{MODULES[module]}: {found}"


def test_the_check_sees_a_wrong_way_import(tmp_path):
    """The rule, applied to a module that breaks it, fails (so the tests above can fail)."""
    wrong = tmp_path / "wrong.py"
    wrong.write_text("from app.plants.guard import guard\nfrom app.store.base import _Keep\n")
    found = imports(wrong)
    assert [(LAYERS[concern(name)], names) for name, names, _ in found] == [(0, ["guard"]), (4, ["_Keep"])]
    assert LAYERS[concern("app.plants.guard")] < LAYERS["app.store"]
