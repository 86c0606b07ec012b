"""The package's layout rules (CONTRIBUTING.md), checked over the import graph of app/.

Imports go one way: the views, then the extension's state, then the helpers (schemas, HTTP,
auth and its rate limits, metrics), then the catalogue of errors, the store, and the settings. The
store never imports Flask nor reads a request's WSGI details; the worker imports nothing of the
service; no module reaches into another concern's private names.
"""

from __future__ import annotations

import ast
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
