"""A client that pipelines many requests and reads their answers steadily gets every one,
in order (the packaged worker).

Each pipelined answer has the read timeout to be taken (README, GUNICORN_READ_TIMEOUT), counted
from when the one before it was taken: not what was left of an earlier one's. Small answers are
what shows it. The kernel takes each whole as soon as the socket has room (no send is left
waiting, so no send re-times the connection), and once the kernel holds what it will of them
unsent, only the client's reads make that room. Here 1,200 `GET /healthz` go at once, and
their answers (about 200 KB) are read at 24 KiB a second through a 4 KiB receive buffer, never
pausing longer than a fraction of the read timeout of 1 s: about 8 s in all. The worker parses
the pipelined bytes 16 KiB at a time, and only a request split between two slices gives it a new
deadline: the answers to one slice's 300 requests (50 KB, 2 s at this pace, twice the read
timeout) must go out on the time each answer gives the next. A worker that left each answer the
time left of the one before it closed this client's connection silently after about 600
answers, every time.

Each request carries its number in X-Request-Id (its id in the answer, as a trusted proxy's is),
so that the answers are checked in order.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.servers import Gunicorn

COUNT = 1200
READ_TIMEOUT = 1.0
PACE = 24 * 1024  # bytes a second the client takes
RECEIVE_BUFFER = 4096  # set before connect, so that the window is the buffer's from the start
BODY = b'{"status":"ok"}\n'
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: %d\r\n\r\n"


@pytest.fixture(scope="module")
def server():
    gunicorn = Gunicorn(
        env={
            "WEB_CONCURRENCY": "1",
            "GUNICORN_READ_TIMEOUT": str(READ_TIMEOUT),
            "PLANTS_TRUSTED_PROXIES": "1",  # the answer's X-Request-Id is the request's
        }
    )
    yield gunicorn
    gunicorn.stop()


def _read_steadily(port: int, requests: bytes, done: int) -> tuple[bytes, float]:
    """Send `requests` at once, then read at PACE until `done` answers' heads have come, the
    server closes, or 30 s; what was read, and the longest pause between two reads."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    received, longest = b"", 0.0
    try:
        sock.connect(("127.0.0.1", port))
        sock.settimeout(5)
        started = last = time.monotonic()
        sock.sendall(requests)
        while time.monotonic() - started < 30:
            data = sock.recv(RECEIVE_BUFFER)
            now = time.monotonic()
            longest, last = max(longest, now - last), now
            if not data:
                break
            received += data
            if received.count(b"\r\n\r\n") >= done and received.endswith(BODY):
                break
            time.sleep(len(data) / PACE)  # PACE bytes a second at most, in steps of a read
    except (ConnectionResetError, TimeoutError):
        pass
    finally:
        sock.close()
    return received, longest


def _answers(received: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """The whole answers in `received`, each as (status line, X-Request-Id, body)."""
    answers, position = [], 0
    while (end := received.find(b"\r\n\r\n", position)) >= 0:
        status, *lines = received[position:end].split(b"\r\n")
        fields = {name.lower(): value.strip() for name, _, value in (line.partition(b":") for line in lines)}
        body_end = end + 4 + int(fields.get(b"content-length", b"0"))
        if body_end > len(received):
            break
        answers.append((status, fields.get(b"x-request-id", b""), received[end + 4 : body_end]))
        position = body_end
    return answers


def test_every_pipelined_answer_reaches_a_client_that_reads_steadily(server):
    requests = b"".join(REQUEST % number for number in range(COUNT))
    received, longest = _read_steadily(server.port, requests, COUNT)
    answers = _answers(received)
    assert len(answers) == COUNT, (
        f"{len(answers)} of {COUNT} pipelined requests answered (longest pause between reads {longest:.2f}s)"
    )
    assert [status for status, _, _ in answers] == [b"HTTP/1.1 200 OK"] * COUNT
    assert [request_id for _, request_id, _ in answers] == [b"%d" % n for n in range(COUNT)]
    assert {body for _, _, body in answers} == {BODY}
