"""Libraries' private names are used in app/compat/ only (CONTRIBUTING.md, "Private interfaces").

Outside app/compat/ (and the gunicorn worker, which has its own rules), no module of app/:
- reads or writes an attribute with a leading underscore that app/ does not define itself;
- subclasses a class of Flask, Werkzeug, marshmallow, redis-py, prometheus_client, limits or
  PyJWT and defines a name with a leading underscore that the library's class has (an override
  of an internal);
- assigns to an attribute of a name it imported from one of those libraries (a monkeypatch);
- drives gunicorn's Arbiter (the `server` its hooks are given) by a name of its class that
  gunicorn does not document for hooks (`WORKERS`, `kill_worker`, `reap_workers`...): the
  documented `server.cfg`, `server.log`, `server.pid` and `server.num_workers` are fine.

A few underscore names are documented as public by their library: those are allowed.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest
from gunicorn.arbiter import Arbiter

APP = Path(__file__).resolve().parents[2] / "app"
LIBRARIES = ("flask", "werkzeug", "marshmallow", "redis", "prometheus_client", "limits", "jwt", "gunicorn")
#: Names of gunicorn's Arbiter a hook may use: its docs' settings name these (`server.cfg`,
#: `server.log`, `server.pid`; nworkers_changed's `num_workers`).
ARBITER_DOCUMENTED = {"cfg", "log", "pid", "num_workers"}
#: What the Arbiter sets on itself (`self.master_pid = ...`), beside its class's names.
ARBITER_SET = {
    node.attr
    for node in ast.walk(ast.parse(inspect.getsource(Arbiter)))
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
    and isinstance(node.value, ast.Name) and node.value.id == "self"
}  # fmt: skip
#: The Arbiter's own methods and attributes, all undocumented for hooks but the above.
ARBITER_INTERNALS = (
    {name for name in vars(Arbiter) if not name.startswith("__")} | ARBITER_SET
) - ARBITER_DOCUMENTED
#: What gunicorn's hooks call the Arbiter they are given, by convention and in its docs.
ARBITER_NAMES = ("server", "arbiter")
#: Underscore names that the library documents as its public interface.
DOCUMENTED = {
    # Flask's docs, "Notes On Proxies": the way to reach the object behind `request` or `current_app`.
    "_get_current_object",
    # marshmallow's docs, "Creating a field class": a custom field overrides these.
    "_serialize",
    "_deserialize",
    # namedtuple's documented methods (the standard library's, not a private name).
    "_make",
    "_asdict",
    "_replace",
    "_fields",
}

#: Names imported from a library that it documents as a namespace for the app's own attributes:
#: Flask's `g` ("The Application Context": store data there during a request), not a monkeypatch.
NAMESPACES = {"g"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def checked_files() -> list[Path]:
    outside = (APP / "compat", APP / "server" / "worker")
    return [path for path in sorted(APP.rglob("*.py")) if not path.is_relative_to(outside[0])
            and not path.is_relative_to(outside[1])]  # fmt: skip


def defined_names(paths: list[Path]) -> set[str]:
    """The names app/ defines itself: functions, classes, module and class attributes, and what
    methods set on `self` or `cls`."""
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for part in ast.walk(target):
                        if isinstance(part, ast.Name):
                            names.add(part.id)
                        elif (
                            isinstance(part, ast.Attribute)
                            and isinstance(part.value, ast.Name)
                            and part.value.id in ("self", "cls")
                        ):
                            names.add(part.attr)
    return names


def library_names(tree: ast.AST) -> set[str]:
    """The names a module binds to one of the libraries or to something imported from one."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARIES:
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def problems(source: str, own: set[str], where: str) -> list[str]:
    """Each private access and each monkeypatch of a library in `source`, one line each."""
    tree = ast.parse(source)
    imported = library_names(tree)
    allowed = own | DOCUMENTED
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in allowed:
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)} (a private name app/ does not define)")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ARBITER_NAMES
            and node.attr in ARBITER_INTERNALS
        ):
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)} (gunicorn's Arbiter, undocumented)")
        if (  # getattr(server, "WORKERS", ...) and hasattr alike
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in ARBITER_NAMES
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in ARBITER_INTERNALS
        ):
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)} (gunicorn's Arbiter, undocumented)")
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
        ):
            targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
        for target in targets:
            root = _root(target)
            if isinstance(target, ast.Attribute) and root in imported and root not in NAMESPACES:
                found.append(
                    f"{where}:{node.lineno}: {ast.unparse(node)[:80]} (a library's attribute changed)"
                )
    return found


def test_no_private_name_of_a_library_outside_compat():
    paths = checked_files()
    own = defined_names(paths)
    found = []
    for path in paths:
        found += problems(path.read_text("utf-8"), own, str(path.relative_to(APP.parent)))
    assert not found, "\n".join(found)


def _class_names(node: ast.ClassDef) -> set[str]:
    """The names a class's own source defines: its body's, and what its methods set on `self`."""
    names = set()
    for part in ast.walk(node):
        if isinstance(part, (ast.FunctionDef, ast.AsyncFunctionDef)) and part in node.body:
            names.add(part.name)
        elif isinstance(part, ast.Name) and isinstance(part.ctx, ast.Store):
            names.add(part.id)
        elif (
            isinstance(part, ast.Attribute)
            and isinstance(part.ctx, ast.Store)
            and isinstance(part.value, ast.Name)
            and part.value.id == "self"
        ):
            names.add(part.attr)
    return names


def _modules() -> dict[str, Path]:
    modules = {}
    for path in checked_files():
        parts = path.relative_to(APP.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = _modules()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_override_of_a_library_internal_outside_compat(module):
    loaded = importlib.import_module(module)
    found = []
    for node in ast.parse(MODULES[module].read_text("utf-8")).body:
        cls = getattr(loaded, node.name, None) if isinstance(node, ast.ClassDef) else None
        if not inspect.isclass(cls):
            continue
        bases = [base for base in cls.__mro__[1:] if base.__module__.split(".")[0] in LIBRARIES]
        for name in sorted(_class_names(node)):
            if _private(name) and name not in DOCUMENTED and any(hasattr(base, name) for base in bases):
                found.append(f"{module}.{cls.__name__}.{name} overrides a library's internal")
    assert not found, "\n".join(found)


def test_the_checks_see_a_private_use_and_a_monkeypatch():
    """The rules, applied to code that breaks them, fail (so the tests above can fail)."""
    source = (
        "import redis\nfrom werkzeug import Response\n"
        "def f(key, response):\n"
        "    response._on_close = []\n"
        "    Response.default_mimetype = None\n"
        "    setattr(redis.Redis, 'x', 1)\n"
        "    server.kill_worker(1, 15), server.num_workers, server.cfg\n"
        "    return key._jwk_data, self._mine, request._get_current_object()\n"
    )
    found = problems(source, {"_mine"}, "bad.py")
    assert sorted(line.split(": ")[1].split(" (")[0] for line in found) == [
        "Response.default_mimetype = None",
        "key._jwk_data",
        "response._on_close",
        "server.kill_worker",
        "setattr(redis.Redis, 'x', 1)",
    ], found


def test_the_worker_takes_from_gunicorn_its_worker_class_alone():
    """The packaged worker stands on gunicorn's worker API, as uvicorn's `UvicornWorker` does: it
    imports `gunicorn.workers.base` (its base class) and `gunicorn` (its version), none of
    gunicorn's undocumented helpers (`gunicorn.util`, `gunicorn.http.wsgi`), which a release may change."""
    found = []
    for path in sorted((APP / "server" / "worker").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found += [
                f"{path.name}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[0] == "gunicorn" and name != "gunicorn"
                and not name.startswith("gunicorn.workers.base")
            ]  # fmt: skip
    assert found == []
