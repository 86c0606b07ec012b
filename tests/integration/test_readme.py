"""The README's examples, run as written, top to bottom, against a real gunicorn.

Every `$ curl …` line of a `sh` block (with its `\\` continuations) is sent as curl would send it,
and its answer is compared with the lines below it: the status line and each header shown (for
`-i`), and the body. `…` stands for text the README leaves out, and a line `...` for headers or
lines left out. `$ NEXT=$(…)` runs in bash as written, and must take the `next` of the answer
before. Examples that need what a
reader must bring (a JWT: `$READ_SCOPED_JWT`) are not run; everything else is.
"""

from __future__ import annotations

import http.client
import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.rawhttp import exchange
from tests.servers import ROOT, Gunicorn

README = ROOT / "README.md"
DOCUMENTED = "http://127.0.0.1:8000"
ELIDED = ("…", "...")


@dataclass
class Example:
    line: int
    command: str
    expected: list[str]


def examples(path: Path) -> list[Example]:
    """The `$ …` commands of the file's `sh` blocks, each with the lines it shows as its answer."""
    found: list[Example] = []
    lines = path.read_text().splitlines()
    in_block = False
    number = 0
    while number < len(lines):
        line = lines[number]
        if line.startswith("```"):
            in_block = line.strip() == "```sh" and not in_block
            number += 1
            continue
        if in_block and line.startswith("$ "):
            start = number
            command = line[2:]
            while command.endswith("\\"):
                number += 1
                command = command[:-1] + " " + lines[number].strip()
            number += 1
            expected = []
            while number < len(lines) and not lines[number].startswith(("$ ", "```")):
                expected.append(lines[number])
                number += 1
            while expected and not expected[-1].strip():
                expected.pop()
            found.append(Example(start + 1, command, expected))
            continue
        number += 1
    return found


def pattern(text: str) -> re.Pattern[str]:
    """`text` with each `…` (or `...`) standing for any text."""
    parts = re.split(r"…|\.\.\.", text)
    return re.compile(".*?".join(re.escape(part) for part in parts), re.DOTALL)


def curl(command: str, base: str) -> tuple[str, list[tuple[str, str]], bytes, bool]:
    """Send a curl command line as curl would: (status line, headers, body, whether `-i`)."""
    words = shlex.split(command.split("  #")[0])
    assert words[0] == "curl", command
    method, headers, data, include, url = None, [], None, False, None
    at = 1
    while at < len(words):
        word = words[at]
        if word in ("-X", "--request"):
            method, at = words[at + 1], at + 2
        elif word in ("-H", "--header"):
            name, _, value = words[at + 1].partition(":")
            headers.append((name.strip(), value.strip()))
            at += 2
        elif word in ("-d", "--data"):
            data, at = words[at + 1].encode(), at + 2
        elif word in ("-i", "--include"):
            include, at = True, at + 1
        elif word in ("-s", "--silent"):
            at += 1
        else:
            assert url is None, f"unexpected {word!r} in {command}"
            url, at = word, at + 1
    assert url, command
    assert url.startswith(DOCUMENTED), command
    if data is not None and not any(name.lower() == "content-type" for name, _ in headers):
        headers.append(("Content-Type", "application/x-www-form-urlencoded"))  # curl's default for -d
    split = urlsplit(base + url.removeprefix(DOCUMENTED))
    conn = http.client.HTTPConnection(split.hostname, split.port, timeout=10)
    target = split.path + (f"?{split.query}" if split.query else "")
    conn.request(method or ("POST" if data is not None else "GET"), target, body=data, headers=dict(headers))
    response = conn.getresponse()
    body = response.read()
    conn.close()
    status = f"HTTP/1.1 {response.status} {response.reason}"
    return status, list(response.getheaders()), body, include


def check(example: Example, base: str) -> bytes:
    status, headers, body, include = curl(example.command, base)
    expected = list(example.expected)
    where = f"README.md line {example.line}: {example.command}"
    text = body.decode().replace(base, DOCUMENTED)
    if include:
        assert expected.pop(0) == status, (where, status, text)
        actual = {name.lower(): value.replace(base, DOCUMENTED) for name, value in headers}
        while expected and expected[0].strip():
            line = expected.pop(0)
            if line.strip() in ELIDED:
                continue
            name, _, value = line.partition(":")
            assert name.lower() in actual, (where, name, actual)
            assert pattern(value.strip()).fullmatch(actual[name.lower()]), (where, line, actual[name.lower()])
        while expected and not expected[0].strip():
            expected.pop(0)
    if expected and expected[-1].strip() in ELIDED:
        expected.pop()
        shown = "".join(line.strip() for line in expected)
        assert pattern(shown).match(text.strip()), (where, text)
    else:
        # A JSON body the README wraps over lines reads as one line.
        shown = "".join(line.strip() if n else line for n, line in enumerate(expected))
        assert pattern(shown).fullmatch(text.strip()), (where, shown, text)
    return body


@pytest.fixture
def readme_server():
    # As the README's webhooks section says its examples ran.
    server = Gunicorn(env={"PLANTS_API_TOKENS": "change-me", "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1"})
    yield server
    server.stop()


def test_the_readme_runs_as_written(readme_server):
    base = f"http://127.0.0.1:{readme_server.port}"
    ran = 0
    last_body = b""
    for example in examples(README):
        if not example.command.startswith(("curl ", "NEXT=")):
            continue
        if example.command.startswith("NEXT="):
            # Run as written, by bash and curl: the cursor comes from the command, not from us.
            script = example.command.replace(DOCUMENTED, base) + '\nprintf %s "$NEXT"'
            next_cursor = subprocess.run(
                ["bash", "-ec", script], capture_output=True, text=True, check=True, timeout=30
            ).stdout
            assert next_cursor == json.loads(last_body)["next"], (example.line, next_cursor)
            continue
        command = (
            example.command.replace("$NEXT", next_cursor) if "$NEXT" in example.command else example.command
        )
        if re.search(r"\$[A-Z_]+", command):
            continue  # needs what the reader brings: a JWT from their identity provider
        last_body = check(Example(example.line, command, example.expected), base)
        ran += 1
    assert ran >= 13


def shell_block(after_heading: str) -> str:
    """The first `sh` block after a heading of the README, as written."""
    text = README.read_text().split(after_heading, 1)[1]
    return text.split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_redis_section_runs_as_written_and_redis_stops_as_it_says(tmp_path):
    """Step 1 and 2 of "Running with Redis" in a fresh home directory (on free ports), then the
    stop command the README gives: Redis writes its log and pid file where it says, serves the
    service, and the plants are there after a restart."""
    import os
    import subprocess
    import time

    from tests.servers import free_port

    block = shell_block("## Running with Redis")
    redis_port = free_port()
    env = {**os.environ, "HOME": str(tmp_path)}
    start_redis = "\n".join(line for line in block.split("# 2.")[0].splitlines() if not line.startswith("#"))
    start_redis = start_redis.replace("\\\n", " ").replace(
        "deploy/redis.conf", "deploy/redis.conf --port " + str(redis_port)
    )
    subprocess.run(["bash", "-ec", start_redis], cwd=ROOT, env=env, check=True, timeout=30)
    home = tmp_path / "plant-store-redis"
    try:
        deadline = time.monotonic() + 10
        while not (home / "redis.pid").exists():
            assert time.monotonic() < deadline, "no pid file"
            time.sleep(0.05)
        assert (home / "redis.log").exists()
        store = f"redis://127.0.0.1:{redis_port}/0"
        assert "PLANTS_STORE_URL=redis://127.0.0.1:6379/0" in block
        server = Gunicorn(
            env={"PLANTS_API_TOKENS": "change-me", "PLANTS_STORE_URL": store}, args=("--workers", "2")
        )
        try:
            conn = server.connection()
            headers = {"Authorization": "Bearer change-me", "Content-Type": "application/json"}
            conn.request("POST", "/plants", body='{"id": 1, "name": "Fern"}', headers=headers)
            assert conn.getresponse().status == 200
        finally:
            server.stop()
    finally:
        stop = "redis-cli -p 6379 shutdown"
        assert stop in README.read_text()
        subprocess.run(stop.replace("6379", str(redis_port)).split(), env=env, check=True, timeout=30)
    deadline = time.monotonic() + 10
    while (home / "redis.pid").exists():  # Redis removes its pid file as it exits
        assert time.monotonic() < deadline, "Redis did not stop"
        time.sleep(0.05)
    assert any(home.glob("appendonlydir/*")), "no append-only file kept"


def github_anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_stays_short_and_its_links_lead_somewhere():
    """At most 450 lines: detail goes to docs/ (operations.md for operators). Every relative link
    of the README and docs/ names a file that exists, and a heading of it when it names one."""
    assert len(README.read_text().splitlines()) <= 450
    assert "(docs/operations.md)" in README.read_text()
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), (page.name, target)
            if anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", file.read_text(), re.MULTILINE)
                assert anchor in {github_anchor(heading) for heading in headings}, (page.name, target)


def table_row(status: str) -> str:
    """The README's row of the table of answers whose status cell is `status`."""
    rows = [line for line in README.read_text().splitlines() if line.startswith("|")]
    return next(row for row in rows if row.split("|")[2].strip() == status)


def test_the_414_row_says_which_server_answers_and_each_answers_so(gunicorns):
    """A request line past the limit is refused before the app sees it: by the packaged worker with
    the JSON Error, by gunicorn's stock gthread worker with its HTML page. The row said "from
    gunicorn" alone, which the packaged worker's own JSON answer is not."""
    row = table_row("414")
    assert "packaged worker's JSON `Error`" in row
    assert "`GUNICORN_WORKER_CLASS=gthread`, gunicorn's own HTML page" in row
    line = b"GET /plants?tags=" + b"a" * 4100 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    packaged = exchange(gunicorns("memory").port, line)
    assert packaged is not None
    assert (packaged.status, packaged.headers["Content-Type"]) == (414, "application/json")
    assert packaged.json()["error"] == 414
    stock = exchange(gunicorns("stock-worker").port, line)
    assert stock is not None
    assert stock.status == 414
    assert stock.body.lstrip().startswith(b"<html>")
