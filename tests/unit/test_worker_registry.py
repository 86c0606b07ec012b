"""The worker's registry chooses whom to displace: past the descriptors' room, the connection
that has lingered longest (its answer is out; only its client's FIN is awaited) goes first, and
never one a thread is serving, on real sockets."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest

from app.server.worker.connection import Conn, Context, RequestLimits
from app.server.worker.loop import Budget, Registry


class _NoParking:
    def step(self, conn: Conn) -> None:
        raise AssertionError("no connection here waits for its answer")

    def resume(self, conn: Conn) -> None:
        raise AssertionError("no connection here waits for its answer")


@pytest.fixture
def registry() -> Iterator[Registry]:
    registry = Registry(lambda: True, [], 5.0, Budget(1 << 20, logging.getLogger("test")))
    yield registry
    for conn in list(registry.conns.values()):
        conn.close()
    registry.epoll.close()


def _connections(registry: Registry, count: int) -> tuple[list[Conn], list[socket.socket]]:
    log = logging.getLogger("test")
    context = Context(
        registry, _NoParking(), lambda conn, request: None, log, 5.0, RequestLimits(0, 0, 0, 8192, 1 << 20)
    )
    conns, clients = [], []
    for _ in range(count):
        server_side, client = socket.socketpair()
        server_side.setblocking(False)
        conn = Conn(server_side, ("127.0.0.1", 1), ("127.0.0.1", 2), context)
        registry.add(conn)
        conns.append(conn)
        clients.append(client)
    return conns, clients


def _linger(registry: Registry, conn: Conn) -> None:
    assert registry.take(conn.fd) is conn
    conn.closing.gracefully()


def test_the_longest_lingering_connection_is_displaced_first(registry):
    conns, clients = _connections(registry, 4)
    first, second, third = conns[2], conns[0], conns[3]
    for conn in (first, second, third):
        _linger(registry, conn)
    assert registry.counted == 1  # the three lingering closes are not counted against the cap
    with registry.lock:
        assert registry.evict(lingering=True) is first
    first.close()
    assert (len(registry.conns), registry.counted) == (3, 1)
    assert registry.take(second.fd) is second  # being served: never displaced
    with registry.lock:
        assert registry.evict(lingering=True) is third
    for client in clients:
        client.close()


def test_a_lingering_close_is_not_counted_against_the_cap(registry):
    conns, clients = _connections(registry, 3)
    assert registry.counted == 3
    _linger(registry, conns[1])
    assert (registry.counted, len(registry.conns)) == (2, 3)
    conns[1].close()
    assert (registry.counted, len(registry.conns)) == (2, 2)
    for client in clients:
        client.close()
