"""A large answer of unknown length (an app's iterable past the worker's 64 KiB hold, with no
Content-Length) goes chunked on HTTP/1.1 as the client takes it, ends with one last chunk, and
the kept-alive connection then answers its next request; one whose app fails past its start is
cut, never ended as if whole. Served by the packaged worker around a host's app written under
tmp_path."""

from __future__ import annotations

import http.client
import time

import pytest

from tests.servers import Gunicorn

HOST_APP = '''
from app import create_app

inner = create_app()
PIECES = [bytes([65 + number]) * 40_000 for number in range(5)]


def failing():
    yield from PIECES[:3]
    raise RuntimeError("the app failed past its answer's start")


def application(environ, start_response):
    """The service, and a large answer of unknown length at /large (/failing: it fails)."""
    if environ["PATH_INFO"] not in ("/large", "/failing"):
        return inner(environ, start_response)
    start_response("200 OK", [("Content-Type", "application/octet-stream")])
    return iter(PIECES) if environ["PATH_INFO"] == "/large" else failing()
'''
LARGE = b"".join(bytes([65 + number]) * 40_000 for number in range(5))


@pytest.fixture
def host(tmp_path):
    (tmp_path / "host_large.py").write_text(HOST_APP)
    server = Gunicorn(
        env={"WEB_CONCURRENCY": "1"}, args=("--pythonpath", str(tmp_path), "host_large:application")
    )
    yield server
    server.stop()


def test_a_large_answer_of_unknown_length_is_chunked_once_and_the_connection_goes_on(host):
    conn = host.connection()
    for _ in range(2):
        conn.request("GET", "/large")
        response = conn.getresponse()
        assert response.status == 200
        assert response.headers["Transfer-Encoding"] == "chunked"
        assert response.headers["Content-Length"] is None
        assert response.read() == LARGE
    conn.request("GET", "/healthz")
    after = conn.getresponse()
    assert after.status == 200, "the kept-alive connection's next request was not answered"
    after.read()
    conn.close()


def test_a_large_answer_whose_app_fails_past_its_start_is_cut_and_the_worker_goes_on(host):
    conn = host.connection()
    conn.request("GET", "/failing")
    response = conn.getresponse()
    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead):  # no last chunk: the client knows it is cut
        response.read()
    conn.close()
    deadline = time.monotonic() + 5  # logged as the connection closes
    while "the app failed past its answer's start" not in host.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "the app failed past its answer's start" in host.output()
    after = host.connection()
    after.request("GET", "/healthz")
    assert after.getresponse().status == 200
    after.close()
