"""Every HTTP error the service makes is named in its catalogue, app/errors.py (flask-smorest's
style): views and helpers raise the catalogue's errors, never a Werkzeug one of their own making,
so that the catalogue is where each answer's status and message are found and changed."""

from __future__ import annotations

import ast
from pathlib import Path

import werkzeug.exceptions

APP = Path(__file__).resolve().parents[2] / "app"
CATALOGUE = APP / "errors.py"
#: The server's own refusals (a malformed request, a head too large), made before the app is
#: called: the worker imports nothing of app outside itself (CONTRIBUTING.md), the catalogue neither.
SERVER = APP / "server" / "worker"
#: The modules a Werkzeug HTTP error is taken from: its classes, and Flask's and Werkzeug's `abort`.
SOURCES = ("werkzeug.exceptions", "werkzeug", "flask")


def _is_http_error(name: str) -> bool:
    made = getattr(werkzeug.exceptions, name, None)
    return name == "abort" or (isinstance(made, type) and issubclass(made, werkzeug.exceptions.HTTPException))


def _names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The names `tree` binds to a Werkzeug HTTP error (or `abort`), and to a module of SOURCES
    (`import werkzeug.exceptions as wx`, `from werkzeug import exceptions`)."""
    errors, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.asname or alias.name for alias in node.names if alias.name in SOURCES)
        elif isinstance(node, ast.ImportFrom) and node.module in SOURCES:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in SOURCES:
                    modules.add(alias.asname or alias.name)
                elif _is_http_error(alias.name):
                    errors.add(alias.asname or alias.name)
    return errors, modules


def werkzeug_errors_made(path: Path) -> list[tuple[int, str]]:
    """Each Werkzeug HTTP error `path` makes (its class called or raised, or `abort` called), by
    line, however it was imported: `from werkzeug.exceptions import NotFound`, a module's name or
    alias (`werkzeug.exceptions.NotFound`, `from werkzeug import exceptions`)."""
    tree = ast.parse(path.read_text("utf-8"))
    errors, modules = _names(tree)

    def is_error(node: ast.expr | None) -> bool:
        if isinstance(node, ast.Name):
            return node.id in errors
        if isinstance(node, ast.Attribute):
            return ast.unparse(node.value) in modules and _is_http_error(node.attr)
        return False

    return sorted(
        (node.lineno, ast.unparse(node))
        for node in ast.walk(tree)
        if (isinstance(node, ast.Call) and is_error(node.func))
        or (isinstance(node, ast.Raise) and is_error(node.exc))
    )


def test_every_http_error_the_service_makes_is_the_catalogues():
    made = [
        f"{path.relative_to(APP.parent)}:{line}: {call}"
        for path in sorted(APP.rglob("*.py"))
        if path != CATALOGUE and SERVER not in path.parents
        for line, call in werkzeug_errors_made(path)
    ]
    assert not made, "name these in app/errors.py, and raise them from there:\n" + "\n".join(made)


def test_the_check_sees_a_werkzeug_error_however_it_is_named(tmp_path):
    module = tmp_path / "bad.py"
    module.write_text(
        "import flask\n"
        "import werkzeug.exceptions\n"
        "from werkzeug.exceptions import HTTPException, NotFound as Missing\n"
        "from app.errors import PlantNotFound\n"
        "def view(exc):\n"
        "    if isinstance(exc, HTTPException):\n"
        "        raise Missing()\n"
        "    flask.abort(404)\n"
        "    raise werkzeug.exceptions.MethodNotAllowed(valid_methods=['GET'])\n"
        "    raise PlantNotFound(1)\n"
        "    raise Missing\n"
        "    raise exceptions.Gone('gone')\n"
        "    raise wx.Conflict\n"
        "from werkzeug import exceptions\n"
        "import werkzeug.exceptions as wx\n"
    )
    assert werkzeug_errors_made(module) == [
        (7, "Missing()"),
        (8, "flask.abort(404)"),
        (9, "werkzeug.exceptions.MethodNotAllowed(valid_methods=['GET'])"),
        (11, "raise Missing"),
        (12, "exceptions.Gone('gone')"),
        (13, "raise wx.Conflict"),
    ]


def test_the_server_is_the_one_place_left_out_and_the_check_reads_it():
    """The worker's refusals are made as the check sees them: leaving it out hides nothing else."""
    assert any(werkzeug_errors_made(path) for path in SERVER.rglob("*.py"))
