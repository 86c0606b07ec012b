"""A client that takes a large answer steadily gets all of it (the packaged worker).

An answer must be taken within the read timeout plus a second per 64 KiB of it (README,
GUNICORN_READ_TIMEOUT). An answer of unknown length (an app's iterable past the 64 KiB the worker
holds, no Content-Length: sent chunked) cannot be given its whole time at its start: each turn
its client takes some of it gives it the read timeout again. Here 2 MiB taken at 256 KiB a second
(8 s, with a read timeout of 2 s) goes through whole, chunked or with its length.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.servers import Gunicorn

HOST_APP = '''
from app import create_app

inner = create_app()
PIECE = b"x" * 65_536
COUNT = 32  # 2 MiB


def application(environ, start_response):
    """The service, and a 2 MiB answer at /large (with its length at /large?length=1)."""
    if environ["PATH_INFO"] != "/large":
        return inner(environ, start_response)
    headers = [("Content-Type", "application/octet-stream")]
    if environ.get("QUERY_STRING") == "length=1":
        headers.append(("Content-Length", str(len(PIECE) * COUNT)))
    start_response("200 OK", headers)
    return (PIECE for _ in range(COUNT))
'''
TOTAL = 65_536 * 32
PACE = 256 * 1024  # bytes a second the client takes: four times the rule's floor


@pytest.fixture
def host(tmp_path):
    (tmp_path / "host_slow_reader.py").write_text(HOST_APP)
    server = Gunicorn(
        env={"WEB_CONCURRENCY": "1", "GUNICORN_READ_TIMEOUT": "2"},
        args=("--pythonpath", str(tmp_path), "host_slow_reader:application"),
    )
    yield server
    server.stop()


def _take_at_pace(port: int, target: str) -> tuple[bytes, int]:
    """GET `target` and read it at PACE, for 20 s at most; the head and the body bytes taken."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # the kernel holds little
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    sock.settimeout(5)
    received, started = b"", time.monotonic()
    try:
        while time.monotonic() - started < 20:
            data = sock.recv(16 * 1024)
            if not data:
                break
            received += data
            # Steady pace: never ahead of PACE bytes a second.
            ahead = len(received) / PACE - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    except (ConnectionResetError, TimeoutError):
        pass
    finally:
        sock.close()
    head, _, body = received.partition(b"\r\n\r\n")
    return head, len(body)


def test_a_chunked_answer_taken_steadily_is_not_cut_off(host):
    head, taken = _take_at_pace(host.port, "/large")
    assert b"Transfer-Encoding: chunked" in head
    # Whole, framed: the data plus the chunk sizes' lines and the last chunk.
    assert taken > TOTAL, f"the answer was cut after {taken} of {TOTAL} bytes"


def test_the_same_answer_with_its_length_taken_steadily_goes_whole(host):
    head, taken = _take_at_pace(host.port, "/large?length=1")
    assert f"Content-Length: {TOTAL}".encode() in head
    assert taken == TOTAL
