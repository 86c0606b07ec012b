"""An answer that can wait and fails at its first step (its `subscribe` raises) is answered as a
failing app is, and the app's iterable is closed (PEP 3333), as for every other answer: the
service's watches give back their place in the watcher caps there. Served by the packaged worker
around a host's app written under tmp_path."""

from __future__ import annotations

import time

import pytest

from tests.rawhttp import exchange, request
from tests.servers import Gunicorn

HOST_APP = '''
from app import create_app

inner = create_app()


class FailsToSubscribe:
    """An answer that can wait (app/watch/parkable.py) whose wake-up cannot be filed."""

    streaming = False

    def __iter__(self):
        return self

    def __next__(self):
        return b""

    def subscribe(self, wake):
        raise RuntimeError("no wake-up")

    def deadline(self):
        return 0.0

    def stop(self):
        pass

    def close(self):
        with open({closed!r}, "a") as out:
            out.write("closed\\n")


def application(environ, start_response):
    if environ["PATH_INFO"] != "/fails-to-subscribe":
        return inner(environ, start_response)
    start_response("200 OK", [("Content-Type", "application/json")])
    return FailsToSubscribe()
'''


@pytest.fixture
def host(tmp_path):
    closed = tmp_path / "closed.txt"
    (tmp_path / "host_parked_failure.py").write_text(HOST_APP.format(closed=str(closed)))
    server = Gunicorn(
        env={"WEB_CONCURRENCY": "1"}, args=("--pythonpath", str(tmp_path), "host_parked_failure:application")
    )
    yield server, closed
    server.stop()


def test_an_answer_failing_at_its_first_step_is_a_500_and_is_closed(host):
    server, closed = host
    answer = exchange(server.port, request("GET", "/fails-to-subscribe"))
    assert answer is not None
    assert answer.status == 500, answer.body
    assert answer.json()["error"] == 500
    deadline = time.monotonic() + 5
    while not closed.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert closed.exists(), "the app's iterable was never closed"
    assert closed.read_text() == "closed\n"  # once
    healthy = exchange(server.port, request("GET", "/healthz"))
    assert healthy is not None
    assert healthy.status == 200
