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


def views(modules: Mapping[str, Path]) -> set[str]:
    """The view modules: those whose functions the route table routes (the modules
    app/plants/routes.py takes from app.plants), and app/health.py."""
    taken = {
        f"app.plants.{name}"
        for module, names, _ in imports(modules["app.plants.routes"])
        if module == "app.plants"
        for name in names
    }
    return (taken | {"app.health"}) & modules.keys()


def views_imported(module: str, graph: Mapping[str, set[str]]) -> set[str]:
    """What `module`, a view, imports of layer 0 (the views and the entry points), itself aside."""
    return {target for target in graph[module] if LAYERS[concern(target)] == 0 and target != module}


VIEWS = views(MODULES)


def written(directory: Path, files: Mapping[str, str]) -> dict[str, Path]:
    """Each module of `files` (its name: its text) written in `directory`, by name."""
    modules = {}
    for name, text in files.items():
        modules[name] = directory / f"{name}.py"
        modules[name].write_text(text)
    return modules


@pytest.mark.parametrize("module", sorted(VIEWS))
def test_a_view_imports_no_other_view(module):
    """Layer 0 imports itself one way only: the entry points import the views (the app the
    blueprint, the blueprint its route table, the table the views), never a view another view,
    nor the table or an entry point. What two views share goes down to a helper."""
    assert not views_imported(module, GRAPH), f"{MODULES[module]}: {sorted(views_imported(module, GRAPH))}"


def test_the_view_check_sees_a_view_importing_another(tmp_path):
    """A view that takes a constant of another, at function level too, is found."""
    routes = "from app.plants import a, b\n"
    taking = "def f():\n    from app.plants.b import SHARED\n"
    helper = "from app.telemetry.request_ids import NOSNIFF\n"
    modules = written(tmp_path, {"app.plants.routes": routes, "app.plants.a": taking, "app.plants.b": helper})
    assert views(modules) == {"app.plants.a", "app.plants.b"}
    assert views_imported("app.plants.a", import_graph(modules)) == {"app.plants.b"}
    assert views_imported("app.plants.b", import_graph(modules)) == set()


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
    modules = written(tmp_path, files)
    graph = import_graph(modules)
    assert graph["app.y"] == {"app.y.c"}
    assert loops(graph) == {frozenset({"app.x.a", "app.x.b", "app.y.c"})}
    assert loops(concern_graph(graph)) == {frozenset({"app.x", "app.y"})}
    assert loops({"app.z": {"app.z"}}) == {frozenset({"app.z"})}


def private_reaches(module: str, path: Path, modules: Mapping[str, Path]) -> list[str]:
    """Where `module` takes another of `modules`' private (`_`) names: imported by name, or read
    off a module it imported (`docs._document()`), within its own concern too."""
    tree = ast.parse(path.read_text("utf-8"))
    found = [
        f"{path}:{line}: {name} {names}"
        for name, names, line in imports(path)
        if name in modules and name != module and any(taken.startswith("_") for taken in names)
    ]
    aliases = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
        if f"{node.module}.{alias.name}" in modules
    }
    found += [
        f"{path}:{node.lineno}: {node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in aliases
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    ]
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_takes_another_modules_private_names(module):
    """A private name is its module's own, in one concern too: what another module needs is public
    (the deprecations read the document the docs view parses: `docs.shipped_document`)."""
    assert not private_reaches(module, MODULES[module], MODULES)


def test_the_private_check_sees_a_name_read_off_a_module(tmp_path):
    modules = written(
        tmp_path, {"app.plants.a": "from app.plants import b\nb._parsed()\n", "app.plants.b": ""}
    )
    assert [
        found.rpartition(": ")[2]
        for found in private_reaches("app.plants.a", modules["app.plants.a"], modules)
    ] == ["b._parsed"]


#: What makes an answer: the JSON record of an error or of a body, and Flask's own makers.
ANSWER_MAKERS = {"app.http.error_handler", "app.http.json_provider"}
FLASK_ANSWER_MAKERS = {"make_response", "jsonify", "abort"}


def answer_makers(path: Path, graph_targets: set[str]) -> set[str]:
    """What of ANSWER_MAKERS and FLASK_ANSWER_MAKERS the module at `path` imports."""
    flask_names = {name for module, names, _ in imports(path) if module == "flask" for name in names}
    return (graph_targets & ANSWER_MAKERS) | (flask_names & FLASK_ANSWER_MAKERS)


@pytest.mark.parametrize("module", sorted(name for name in MODULES if concern(name) == "app.auth"))
def test_who_is_let_in_is_decided_not_answered(module):
    """app/auth/ hands back a refusal (an HTTPException of app/errors.py); the guard and the views
    answer it, as they answer every other refusal."""
    found = answer_makers(MODULES[module], GRAPH[module])
    assert not found, f"{MODULES[module]}: {sorted(found)}"


def test_the_answer_check_sees_an_answer_made(tmp_path):
    made = tmp_path / "wrong.py"
    made.write_text("from flask import g, jsonify\nfrom app.http.error_handler import error_response\n")
    assert answer_makers(made, import_graph({"app.auth.made": made, **MODULES})["app.auth.made"]) == {
        "jsonify",
        "app.http.error_handler",
    }


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
