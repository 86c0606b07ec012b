"""gunicorn's `post_request` hook runs once for every request on the packaged worker, as on
gunicorn's own workers: for an answer served after parking (a long-poll), for a stream its client
left, and for a request whose `pre_request` hook failed (answered 500, as a failing app is), as for
any other; counted by hooks in a gunicorn config under tmp_path."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.helpers import parked_long_poll
from tests.rawhttp import exchange, request
from tests.servers import TOKEN, Gunicorn

HOOKS = """
from app.server.gunicorn_conf import *  # noqa: F403


def _note(line):
    with open({path!r}, "a") as out:
        out.write(line + "\\n")


def pre_request(worker, req):
    _note(f"pre {{req.path}}")
    if req.path == "/pre-request-fails":
        raise RuntimeError("the hook failed")


def post_request(worker, req, environ, resp):
    _note(f"post {{req.path}} {{resp.status_code}}")
"""


@pytest.fixture
def hooked(tmp_path):
    notes = tmp_path / "hooks.txt"
    config = tmp_path / "gunicorn_hooks.py"
    config.write_text(HOOKS.format(path=str(notes)))
    server = Gunicorn(env={"GUNICORN_THREADS": "1", "WEB_CONCURRENCY": "1"}, args=("-c", str(config)))
    yield server, notes
    server.stop()


def notes_of(notes: Path, path: str) -> list[str]:
    lines = notes.read_text().splitlines() if notes.exists() else []
    return [line for line in lines if line.split(" ")[1] == path]


def wait_for_notes(notes: Path, path: str, count: int, timeout: float = 15) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(found := notes_of(notes, path)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_a_long_poll_answered_after_parking_runs_post_request_once(hooked):
    server, notes = hooked
    answer = parked_long_poll(server, TOKEN, 62_001)
    assert answer is not None
    assert answer.status == 200, answer.body
    assert [event["plant"]["id"] for event in answer.json()["events"]] == [62_001]  # woken, after parking
    assert wait_for_notes(notes, "/events", 2) == ["pre /events", "post /events 200"]


def test_a_stream_its_client_left_runs_post_request_once(hooked):
    server, notes = hooked
    lines = ["GET /events HTTP/1.1", "Host: x", f"Authorization: Bearer {TOKEN}", "Accept: text/event-stream"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall("\r\n".join([*lines, "", ""]).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
        assert head.startswith(b"HTTP/1.1 200 ")
        assert notes_of(notes, "/events") == ["pre /events"]  # still streaming
    assert wait_for_notes(notes, "/events", 2) == ["pre /events", "post /events 200"]
    time.sleep(0.5)  # and no second one follows
    assert notes_of(notes, "/events") == ["pre /events", "post /events 200"]


def test_a_failing_pre_request_hook_is_answered_500_and_runs_post_request(hooked):
    """The client gets the JSON Error record, as for a failing app, not a connection closed
    without an answer; the worker serves on."""
    server, notes = hooked
    answer = exchange(server.port, request("GET", "/pre-request-fails"))
    assert answer is not None
    assert answer.status == 500, answer.body
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["error"] == 500
    assert wait_for_notes(notes, "/pre-request-fails", 2) == [
        "pre /pre-request-fails",
        "post /pre-request-fails 500",
    ]
    healthy = exchange(server.port, request("GET", "/healthz"))
    assert healthy is not None
    assert healthy.status == 200
