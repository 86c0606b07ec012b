"""Every file of the repository that a comment, a docstring or a doc names exists: a file that
moves takes the mentions of it along, or a reader follows a path to nothing."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The kinds of file read for mentions: the code, the docs and the configurations.
READ = (".py", ".md", ".lua", ".conf", ".cfg", ".toml", ".yaml", ".js", ".txt")
#: A path from the repository's root, to a file (with its extension) or to a folder (with `/`):
#: `app/store/base.py`, `tests/unit/`, `docs/webhooks.md`, `deploy/redis.conf`, `bench/lua/`.
ROOTED = re.compile(
    r"(?<![\w./~-])((?:app|tests|docs|deploy|bench|\.ci)/(?:[\w.-]+/)*(?:[\w-]+\.\w+|))(?![\w/-])"
)
#: An HTML attribute's relative URL (the API page's stylesheet and scripts) is a route, not a file.
URL_ATTRIBUTE = re.compile(r"""(?:href|src)=["']$""")
#: A word in capitals stands for any in a file's name (`bench/NAME.py`, `partitions-TIME.json`).
PLACEHOLDER = re.compile(r"(?:^|[/-])(?!README\b|CONTRIBUTING\b)[A-Z]{3,}(?=[-.])")
#: A module named alone (`base.py`): some file of the repository has that name.
ALONE = re.compile(r"(?<![\w./~-])([\w-]+\.py)\b")
#: Files that tests write for themselves, which are not the repository's.
WRITTEN_BY_TESTS = {
    "wrong.py",
    "breaker.py",
    "breaking_conf.py",
    "bad.py",
    "host_middleware.py",
    "gunicorn_hooks.py",
    "host_slow_reader.py",
    "host_large.py",
    "host_parked_failure.py",
    "host_app_framing.py",
    "host_environ.py",
    "host_shop.py",
    "host_shop_conf.py",
}


def read_files() -> list[Path]:
    """The repository's tracked and new (not ignored) files of the kinds in READ."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return [ROOT / name for name in listed if name.endswith(READ) and (ROOT / name).is_file()]


def ignored(paths: set[str]) -> set[str]:
    """Those of `paths` that git ignores: outputs (bench/results/) are named, not kept, and a fresh
    clone has none until a benchmark runs."""
    if not paths:
        return set()
    found = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT, input="\n".join(sorted(paths)), capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    return set(found)


def named_paths(text: str) -> list[tuple[int, str]]:
    """The repository paths `text` names, each with its line number."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in ROOTED.finditer(line):
            if not URL_ATTRIBUTE.search(line[: match.start()]):
                found.append((number, match[1]))
    return found


def test_every_path_named_in_the_repository_exists():
    absent = [
        (f"{path.relative_to(ROOT)}:{number}", named)
        for path in read_files()
        for number, named in named_paths(path.read_text("utf-8", errors="replace"))
        if not (ROOT / named).exists() and not PLACEHOLDER.search(named)
    ]
    outputs = ignored({named for _, named in absent})
    missing = [f"{where}: {named}" for where, named in absent if named not in outputs]
    assert not missing, "\n".join(missing)


def test_every_module_named_alone_exists():
    files = read_files()
    names = {path.name for path in files} | WRITTEN_BY_TESTS
    missing = [
        f"{path.relative_to(ROOT)}:{number}: {match[1]}"
        for path in files
        for number, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), start=1)
        for match in ALONE.finditer(line)
        if match[1] not in names
    ]
    assert not missing, "\n".join(missing)


def test_the_check_finds_paths_as_they_are_written():
    text = (
        "see app/store/base.py, `tests/unit/` and (docs/webhooks.md).\n"
        'a route: <link href="docs/assets/swagger-ui.css">; not a path: /app/x.py, ~/bench/y.py\n'
        "deploy/redis.conf, bench/lua/ and .ci/run\n"
    )
    assert ignored({"bench/results/", "bench/results/x.json", "bench/README.md"}) == {
        "bench/results/",
        "bench/results/x.json",
    }
    assert PLACEHOLDER.search("bench/results/NAME-TIME.json")
    assert PLACEHOLDER.search("bench/results/partitions-TIME.json")
    assert not PLACEHOLDER.search("bench/README.md")
    assert not PLACEHOLDER.search("CONTRIBUTING.md")
    assert named_paths(text) == [
        (1, "app/store/base.py"),
        (1, "tests/unit/"),
        (1, "docs/webhooks.md"),
        (3, "deploy/redis.conf"),
        (3, "bench/lua/"),
    ]
