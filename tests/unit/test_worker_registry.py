"""The worker's registry chooses whom to displace: past the descriptors' room, the connection
that has lingered longest (its answer is out; only its client's FIN is awaited) goes first, and
never one a thread is serving; and a connection handed back is armed outside its lock, yet the arm
never lands on the next connection given its descriptor number. On real sockets and epoll."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import pytest

from app.server.worker.connection import WRITE, Conn, Context, RequestLimits
from app.server.worker.loop import Admission, Budget, Registry


def _no_parking(conn: Conn) -> None:
    raise AssertionError("no connection here waits for its answer")


@pytest.fixture
def registry() -> Iterator[Registry]:
    registry = Registry(lambda: True, [], 5.0, Budget(1 << 20, logging.getLogger("test")))
    yield registry
    for conn in list(registry.conns.values()):
        conn.close()
    registry.epoll.close()


def _context(registry: Registry) -> Context:
    limits = RequestLimits(0, 0, 0, 8192, 1 << 20)
    return Context(registry, _no_parking, lambda conn, request: None, logging.getLogger("test"), 5.0, limits)


def _connections(registry: Registry, count: int) -> tuple[list[Conn], list[socket.socket]]:
    conns, clients = [], []
    for _ in range(count):
        server_side, client = socket.socketpair()
        server_side.setblocking(False)
        conn = Conn(server_side, ("127.0.0.1", 1), ("127.0.0.1", 2), _context(registry))
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
    admission = Admission(registry, 1000, 1, logging.getLogger("test"))
    with registry.lock:
        assert admission.evict(lingering=True) is first
    first.close()
    assert (len(registry.conns), registry.counted) == (3, 1)
    assert registry.take(second.fd) is second  # being served: never displaced
    with registry.lock:
        assert admission.evict(lingering=True) is third
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


def _accept_on(registry: Registry, fd: int, kept: list[socket.socket]) -> tuple[Conn, socket.socket]:
    """A new connection on descriptor `fd` (the lowest free one, as accept() takes it), and its client."""
    for _ in range(8):
        pair = socket.socketpair()
        kept += pair
        if fd in (pair[0].fileno(), pair[1].fileno()):
            server_side, client = pair if pair[0].fileno() == fd else pair[::-1]
            server_side.setblocking(False)
            conn = Conn(server_side, ("127.0.0.1", 1), ("127.0.0.1", 2), _context(registry))
            registry.add(conn)
            return conn, client
    raise AssertionError(f"descriptor {fd} was not reused")


def test_an_arm_in_flight_never_lands_on_the_connection_that_took_its_number(registry, monkeypatch):
    """Another thread closes the connection between its hand-back and its arm (its deadline passed,
    as the main thread's beat finds), and the next accept() takes its number: the arm must not give
    the new connection a turn it did not ask for (a parked watch's would close it unanswered)."""
    (old,), (client,) = _connections(registry, 1)
    old.standing.deadline = 0.0  # past: the main thread's beat times it out once it is handed back
    assert registry.take(old.fd) is old
    fd, kept = old.fd, [client]
    new: list[tuple[Conn, socket.socket]] = []

    def beat_then_accept() -> None:  # the main thread's beat, then a request thread's accept()
        _, expired = registry.expired()
        for conn in expired:
            conn.closing.time_out()
        new.append(_accept_on(registry, fd, kept))

    arm, other = registry._arm, threading.Thread(target=beat_then_accept, daemon=True)

    def arm_after_a_thread_switch(conn: Conn, events: int) -> None:
        other.start()
        other.join(timeout=0.5)  # the other thread may have to wait for this arm
        arm(conn, events)

    monkeypatch.setattr(registry, "_arm", arm_after_a_thread_switch)
    registry.rearm(old, WRITE)  # its answer waits for the socket: armed WRITE
    other.join(timeout=5.0)
    try:
        assert len(new) == 1
        assert registry.conns[fd] is new[0][0]
        # The new connection's client has sent nothing: it is not woken (a stray WRITE would give
        # it a turn it did not ask for), and it is still armed for its request.
        assert registry.epoll.poll(0) == []
        new[0][1].send(b"GET / HTTP/1.1\r\n")
        assert [fd_ for fd_, _ in registry.epoll.poll(1.0)] == [fd]
    finally:
        for sock in kept:
            sock.close()
