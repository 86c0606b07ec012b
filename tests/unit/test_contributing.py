"""CONTRIBUTING.md stays true to the code: each hop of its "Where a watch waits" names a module
and a function, class or attribute that are there, so a reader who follows it reaches code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"

#: A hop's `file:name`, the file under app/: `watch/watches.py:Watch.__next__`.
HOP = re.compile(r"`((?:[\w-]+/)*[\w-]+\.py):([\w.]+)`")


def section(text: str, heading: str) -> str:
    """The paragraph that starts with the bold `heading`, and its list, to the next blank line
    after the list."""
    start = text.index(f"**{heading}**")
    end = text.find("\n\n", text.index("\n1. ", start))
    return text[start : end if end >= 0 else len(text)]


def defined(path: Path, dotted: str) -> bool:
    """Whether `dotted` (a function, class or assignment, or a class's member) is in `path`."""
    body: list[ast.stmt] = ast.parse(path.read_text("utf-8")).body
    for part in dotted.split("."):
        found = next((node for node in body if part in names_of(node)), None)
        if found is None:
            return False
        body = found.body if isinstance(found, ast.ClassDef) else []
    return True


def names_of(node: ast.stmt) -> set[str]:
    """The names a statement of a module or a class body defines."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {target.id for target in node.targets if isinstance(target, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def hops() -> list[tuple[str, str]]:
    return HOP.findall(section(CONTRIBUTING.read_text("utf-8"), "Where a watch waits"))


def test_every_hop_of_where_a_watch_waits_is_in_the_code():
    walk = hops()
    assert len(walk) >= 10, walk  # the walk-through is there, and parsed
    missing = [
        f"{file}:{name}" for file, name in walk if not (APP / file).is_file() or not defined(APP / file, name)
    ]
    assert not missing, missing


def test_the_walk_through_reaches_the_wait_and_its_fall_back():
    """It names where a parked watch waits and where one blocked in a thread does."""
    walk = set(hops())
    assert ("plants/routes.py", "ROUTES") in walk
    assert ("watch/signal.py", "FeedSignal.subscribe") in walk
    assert ("watch/watches.py", "Watch._block") in walk


def test_a_name_that_is_not_there_is_found_missing(tmp_path: Path) -> None:
    module = tmp_path / "walked"  # any file Python can parse
    module.write_text("X = 1\nclass A:\n    y: int = 2\n    def f(self):\n        pass\n")
    assert all(defined(module, name) for name in ("X", "A", "A.f", "A.y"))
    assert not any(defined(module, name) for name in ("A.g", "f", "X.f"))
