"""The packaged worker's own refusal in place of an app's answer (a watch past the worker's share of
its connections) keeps the app's CORS headers: a page on an allowed origin reads the JSON 503 and
its Retry-After, where a browser would otherwise show it only a network error."""

from __future__ import annotations

import json
import select
import socket
import time

from tests.helpers import watches_started
from tests.servers import TOKEN, Gunicorn

ORIGIN = "http://127.0.0.1:5173"
WATCH = (
    f"GET /events?after=now&wait=20 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
    f"Origin: {ORIGIN}\r\n\r\n"
)


def held_or_answered(server: Gunicorn, sock: socket.socket, held: int, seconds: float = 30) -> bool:
    """Whether the watch just sent on `sock` is held (the worker counted it started, one more than
    the `held` before it), or else answered: each looked for until one is seen, not a fixed wait."""
    deadline = time.monotonic() + seconds
    while not select.select([sock], [], [], 0.05)[0]:
        if watches_started(server, TOKEN) > held:
            return True
        assert time.monotonic() < deadline, "the watch was neither held nor answered"
    return False


def test_a_watch_past_the_workers_share_is_a_503_a_page_can_read():
    # 10 connections: 9 watches at most (90%); past them a watch is the worker's JSON 503.
    server = Gunicorn(args=("--worker-connections", "10"), env={"PLANTS_CORS_ORIGINS": ORIGIN})
    held: list[socket.socket] = []
    try:
        for _ in range(12):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(WATCH.encode())
            if held_or_answered(server, sock, len(held)):  # a long-poll that waits: held
                held.append(sock)
                continue
            answer = sock.recv(65536)
            while b"\r\n\r\n" not in answer or not answer.endswith(b"\n"):
                answer += sock.recv(65536)
            sock.close()
            break
        else:
            raise AssertionError("no watch was refused")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 "), head
        assert f"\r\nAccess-Control-Allow-Origin: {ORIGIN}\r\n".encode() in head
        assert b"\r\nVary: Origin\r\n" in head
        assert b"Retry-After" in head.split(b"Access-Control-Expose-Headers: ")[1].split(b"\r\n")[0]
        assert b"\r\nRetry-After: 5\r\n" in head
        assert json.loads(body)["error"] == 503
        assert held, "no watch was held before the refusal"
    finally:
        for sock in held:
            sock.close()
        server.stop()
