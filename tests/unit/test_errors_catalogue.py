"""Every HTTP error the service makes is named in its catalogue, app/errors.py (flask-smorest's
style): views and helpers raise the catalogue's errors, never a Werkzeug one of their own making,
so that the catalogue is where each answer's status and message are found and changed."""

from __future__ import annotations

import ast
from pathlib import Path

import werkzeug.exceptions

APP = Path(__file__).resolve().parents[2] / "app"
CATALOGUE = APP / "errors.py"
#: The modules a Werkzeug HTTP error is taken from: its classes, and Flask's and Werkzeug's `abort`.
SOURCES = ("werkzeug.exceptions", "werkzeug", "flask")


def _is_http_error(name: str) -> bool:
    made = getattr(werkzeug.exceptions, name, None)
    return name == "abort" or (isinstance(made, type) and issubclass(made, werkzeug.exceptions.HTTPException))


def werkzeug_errors_made(path: Path) -> list[tuple[int, str]]:
    """Each call in `path` that makes a Werkzeug HTTP error (its class, or `abort`), by line, however
    it was imported: `from werkzeug.exceptions import NotFound`, or `werkzeug.exceptions.NotFound`."""
    tree = ast.parse(path.read_text("utf-8"))
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in SOURCES
        for alias in node.names
        if _is_http_error(alias.name)
    }
    made = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if (isinstance(function, ast.Name) and function.id in imported) or (
            isinstance(function, ast.Attribute)
            and ast.unparse(function.value) in SOURCES
            and _is_http_error(function.attr)
        ):
            made.append((node.lineno, ast.unparse(node)))
    return sorted(made)


def test_every_http_error_the_service_makes_is_the_catalogues():
    made = [
        f"{path.relative_to(APP.parent)}:{line}: {call}"
        for path in sorted(APP.rglob("*.py"))
        if path != CATALOGUE
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
    )
    assert werkzeug_errors_made(module) == [
        (7, "Missing()"),
        (8, "flask.abort(404)"),
        (9, "werkzeug.exceptions.MethodNotAllowed(valid_methods=['GET'])"),
    ]
