"""CONTRIBUTING.md stays true to the code: its app/ tree is the layout on disk (every file it
names is there, every module of app/ is named), and each hop of its "Where a watch waits" and
"Where a request's bytes go" names a module and a function, class or attribute that are there, so
a reader who follows it reaches code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"

#: A line of the tree: what draws it, then an entry (one name, or several, comma-separated) and its
#: words, or (no branch) more words of the entry above.
ENTRY = re.compile(r"^(?P<indent>[│ ]*)(?:[├└]── (?P<names>[^\s,]+(?:, [^\s,]+)*))?(?P<words>.*)$")
#: A file that an entry's words name (`logs.py`, `scripts/*.lua`), under the entry's folder.
MENTION = re.compile(r"(?<![\w./-])((?:[\w*-]+/)*[\w*-]+\.(?:py|lua|yaml))\b")
#: An entry whose words say its files are described further down the guide, not in the tree.
BELOW = "(below)"


def tree(text: str) -> list[str]:
    """The lines of the app/ tree, its `app/` line excluded."""
    start = text.index("```\napp/\n") + len("```\napp/\n")
    return text[start : text.index("```", start)].splitlines()


def listed(lines: list[str]) -> tuple[set[str], set[str], set[str]]:
    """The tree's entries and the files their words name, as paths under app/ (a folder's ending
    in `/`), and the folders whose files the guide describes below the tree."""
    entries: set[str] = set()
    named: set[str] = set()
    below: set[str] = set()
    folders = [""]  # the folder of each depth: "" is app/ itself
    current = ""  # the entry the words are about
    for line in lines:
        match = ENTRY.match(line)
        assert match is not None, line
        if match["names"] is not None:
            depth = len(match["indent"]) // 4
            del folders[depth + 1 :]
            parent = folders[depth]
            names = match["names"].split(", ")
            entries.update(parent + name for name in names)
            current = parent + names[-1]
            folders.append(current if current.endswith("/") else parent)
        where = current if current.endswith("/") else current.rpartition("/")[0] + "/" * ("/" in current)
        named.update(where + mention for mention in MENTION.findall(match["words"]))
        if BELOW in match["words"]:
            below.add(current)
    return entries, named, below


def test_every_file_the_tree_names_is_on_disk():
    entries, named, _ = listed(tree(CONTRIBUTING.read_text("utf-8")))
    assert len(entries) > 30, sorted(entries)  # the tree is there, and parsed
    absent = sorted(path for path in entries | named if not any(APP.glob(path.rstrip("/") or ".")))
    assert not absent, absent


def test_every_module_of_app_is_in_the_tree():
    """Named by an entry or by its folder's words (a package's `__init__.py` by its folder's entry);
    a folder whose entry says `(below)` has its modules named further down the guide."""
    text = CONTRIBUTING.read_text("utf-8")
    entries, named, below = listed(tree(text))
    unlisted = []
    for path in sorted(APP.rglob("*.py")):
        relative = path.relative_to(APP).as_posix()
        folder = relative.rpartition("/")[0] + "/" * ("/" in relative)
        if relative in entries | named or (path.name == "__init__.py" and folder in entries | {""}):
            continue
        if folder in below and f"`{path.name}`" in text:
            continue
        unlisted.append(relative)
    folders = {path.parent.relative_to(APP).as_posix() + "/" for path in APP.rglob("*.py")} - {"./"}
    assert not unlisted, unlisted
    assert folders <= entries, sorted(folders - entries)


def test_the_tree_is_read_as_drawn():
    lines = [
        "├── base.py          one",
        "├── b/               a package: url.py, and scripts/*.lua",
        "│   ├── feed.py, store.py   two at once",
        "│   └── f/           more (below)",
        "│                    still f's: table.py",
        "└── lua.py           words of lua.py naming probe.py",
    ]
    entries, named, below = listed(lines)
    assert entries == {"base.py", "b/", "b/feed.py", "b/store.py", "b/f/", "lua.py"}
    assert named == {"b/url.py", "b/scripts/*.lua", "b/f/table.py", "lua.py", "probe.py"}
    assert below == {"b/f/"}


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


WATCH, REQUEST = "Where a watch waits", "Where a request's bytes go"


def hops(heading: str = WATCH) -> list[tuple[str, str]]:
    return HOP.findall(section(CONTRIBUTING.read_text("utf-8"), heading))


@pytest.mark.parametrize("heading", [WATCH, REQUEST])
def test_every_hop_of_a_walk_through_is_in_the_code(heading: str) -> None:
    walk = hops(heading)
    assert len(walk) >= 10, walk  # the walk-through is there, and parsed
    missing = [
        f"{file}:{name}" for file, name in walk if not (APP / file).is_file() or not defined(APP / file, name)
    ]
    assert not missing, missing


def test_the_request_walk_through_goes_from_accept_to_send() -> None:
    """A stranger finds where the worker accepts, parses, calls the app and sends."""
    walk = set(hops(REQUEST))
    assert ("server/worker/loop.py", "run_thread") in walk
    assert ("server/worker/loop.py", "Admission._accept_all") in walk
    assert ("server/worker/connection.py", "Conn._receive") in walk
    assert ("server/worker/cycle.py", "Serving.serve") in walk
    assert ("server/worker/connection.py", "Outgoing.put") in walk


def test_the_walk_through_reaches_the_wait_and_its_fall_back():
    """It names where a parked watch waits and where one blocked in a thread does."""
    walk = set(hops())
    assert ("plants/routes.py", "ROUTES") in walk
    assert ("watch/feed_signal.py", "FeedSignal.subscribe") in walk
    assert ("watch/watches.py", "Watch._block") in walk
    assert ("server/worker/loop.py", "Registry.wake") in walk  # what wakes a parked one
    assert ("server/worker/parking.py", "Parking._finish") in walk  # how its answer goes


def test_a_name_that_is_not_there_is_found_missing(tmp_path: Path) -> None:
    module = tmp_path / "walked"  # any file Python can parse
    module.write_text("X = 1\nclass A:\n    y: int = 2\n    def f(self):\n        pass\n")
    assert all(defined(module, name) for name in ("X", "A", "A.f", "A.y"))
    assert not any(defined(module, name) for name in ("A.g", "f", "X.f"))
