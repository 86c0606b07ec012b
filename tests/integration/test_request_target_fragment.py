"""A request target's fragment (`GET /healthz#top`: clients should not send one, some do) is no
part of the path (RFC 9110 section 4.2.5): PATH_INFO and QUERY_STRING leave it out on the packaged
worker as on gunicorn's gthread.
"""

from __future__ import annotations

import socket

import pytest

from tests.servers import Gunicorn


@pytest.fixture(params=["app.server.worker.PlantsWorker", "gthread"])
def server(request):
    server = Gunicorn(env={"WEB_CONCURRENCY": "1", "GUNICORN_WORKER_CLASS": request.param})
    yield server
    server.stop()


def _status_line(port: int, target: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        received = b""
        while b"\r\n" not in received:
            data = sock.recv(4096)
            if not data:
                break
            received += data
    return received.partition(b"\r\n")[0]


def test_a_fragment_in_the_request_target_is_not_part_of_the_path(server):
    assert _status_line(server.port, b"/healthz#top") == b"HTTP/1.1 200 OK"
    assert _status_line(server.port, b"/healthz#top?x=1") == b"HTTP/1.1 200 OK"
