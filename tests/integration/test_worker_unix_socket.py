"""The packaged worker serves on a unix socket (`GUNICORN_BIND=unix:PATH`, the README's bind
settings) as on TCP, though its peer has no address for the environ's REMOTE_ADDR."""

from __future__ import annotations

import json
import os
import socket
import sys
import time

import pytest

from tests.servers import ROOT, TOKEN, Served, free_port


@pytest.fixture
def unix_server(tmp_path):
    path = tmp_path / "plants.sock"
    port = free_port()  # beside it: the start is awaited on /healthz over TCP
    env = {
        **os.environ,
        "PLANTS_API_TOKENS": TOKEN,
        "WEB_CONCURRENCY": "1",
        "GUNICORN_BIND": f"127.0.0.1:{port},unix:{path}",
    }
    server = Served([sys.executable, "-m", "gunicorn"], env, ROOT, port)
    yield server, path
    server.stop()


def unix_get(path) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        sock.sendall(
            b"GET /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n"
            % TOKEN.encode()
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_request_on_a_unix_socket_is_answered(unix_server):
    _, path = unix_server
    answer = unix_get(path)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert json.loads(body) == {"plants": []}


def test_a_unix_socket_peer_is_logged_as_a_dash_not_an_empty_field(unix_server):
    """The access line's first field is the client's address; a unix socket's peer has none, and
    an empty field made the line one field short for anything that splits it on spaces."""
    server, path = unix_server
    head = unix_get(path).partition(b"\r\n\r\n")[0].decode()
    request_id = next(
        line.split(":", 1)[1].strip()
        for line in head.split("\r\n")
        if line.lower().startswith("x-request-id:")
    )
    deadline = time.monotonic() + 10
    while not (
        lines := [line for line in server.output().splitlines() if f"request_id={request_id}" in line]
    ):
        assert time.monotonic() < deadline, "no access line for the request"
        time.sleep(0.05)
    assert 'gunicorn.access: - http "GET /plants HTTP/1.1" 200 ' in lines[0], lines[0]
