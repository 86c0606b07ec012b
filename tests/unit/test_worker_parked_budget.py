"""A parked answer is held to the worker's memory budget as it is handed back, as any other
connection is: a long-poll's collected page that takes the worker past its budget displaces the
connection making the least progress (a stalled upload here) at once, and is itself kept (a
waiting answer is never displaced). On real sockets, with the worker's registry and parking."""

from __future__ import annotations

import logging
import socket
from functools import partial
from typing import Any

from app.server.worker.connection import Conn, Context, RequestLimits
from app.server.worker.cycle import Answer, Parked, Request
from app.server.worker.loop import Budget, Registry
from app.server.worker.parking import Parking

LIMIT = 64 * 1024
PAGE = b"e" * 40_000
UPLOAD_HEAD = b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n"


def _record(recorded: list[str], answer: Answer, *_: Any) -> None:
    recorded.append(answer.status)  # the status its access line would show


class _LongPoll:
    """A waiting answer (parking.py's interface) that collects one page, then waits."""

    streaming = False

    def __init__(self) -> None:
        self.pieces = [PAGE]
        self.closed = False

    def __next__(self) -> bytes:
        return self.pieces.pop() if self.pieces else b""

    def subscribe(self, wake: Any) -> None:
        self.wake = wake

    def deadline(self) -> float:
        return float("inf")

    def stop(self) -> None:
        self.pieces.clear()

    def close(self) -> None:
        self.closed = True


def _closed_by_server(client: socket.socket) -> bool:
    client.settimeout(2.0)
    try:
        return client.recv(1) == b""
    except (TimeoutError, OSError):
        return False


def test_a_parked_long_polls_page_past_the_budget_displaces_a_stalled_upload():
    log = logging.getLogger("test")
    registry = Registry(lambda: True, [], 5.0, Budget(LIMIT, log))
    registry.watch_limit = 4
    recorded: list[str] = []
    parking = Parking(registry, log, lambda: True)
    context = Context(
        registry, parking.step, lambda conn, request: None, log, 5.0, RequestLimits(0, 0, 0, 8192, 1 << 20)
    )
    pairs = [socket.socketpair() for _ in range(2)]
    for server_side, _ in pairs:
        server_side.setblocking(False)
    upload, watch = (
        Conn(server_side, ("127.0.0.1", 1), ("127.0.0.1", 2), context) for server_side, _ in pairs
    )
    (_, upload_client), (_, watch_client) = pairs
    try:
        for conn in (upload, watch):
            registry.add(conn)
        upload_client.sendall(UPLOAD_HEAD + b" " * 50_000)  # its body stops 10,000 bytes short
        assert registry.take(upload.fd) is upload
        upload.turn()
        assert registry.budget.held == 50_000  # its body so far, within the budget: kept
        assert upload.fd in registry.conns

        assert registry.take(watch.fd) is watch
        answer, poll = Answer(), _LongPoll()
        answer.start_response("200 OK", [("Content-Type", "application/json")])
        record = partial(_record, recorded)
        parked = Parked(poll, answer, Request(), {}, True, 0.0, record, partial(registry.wake, watch))
        assert parking.start(watch, parked)

        assert watch.standing.parked is not None  # parked, holding its page
        assert upload.fd not in registry.conns  # displaced as the watch was handed back
        assert _closed_by_server(upload_client)
        assert registry.budget.held == len(PAGE)
        assert not _closed_by_server(watch_client)
    finally:
        watch.close()
        registry.epoll.close()
        for _, client in pairs:
            client.close()
    assert poll.closed
    assert recorded == ["499 Client Closed Request"]  # nothing of it was sent
