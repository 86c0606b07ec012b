"""The packaged worker serves on a unix socket (`GUNICORN_BIND=unix:PATH`, the README's bind
settings) as on TCP, though its peer has no address for the environ's REMOTE_ADDR."""

from __future__ import annotations

import json
import os
import socket
import sys

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


def test_a_request_on_a_unix_socket_is_answered(unix_server):
    _, path = unix_server
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
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert json.loads(body) == {"plants": []}
