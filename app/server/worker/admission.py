"""Accepting connections (`Admission`): the connection cap, and descriptors running out.

- **The cap.** At most `worker_connections` connections (lowered at start to what the open-file
  limit allows, with one line that says so); a connection lingering after its close does not
  count against it (those are bounded apart, and displaced first when descriptors run short).
  Past the cap, the client just accepted displaces the connection making the least progress
  (displacement.py), never itself: N newcomers displace N connections at most. Waiting answers
  (watches, parking.py) are never displaced, so they hold a share of the cap (`watch_limit`);
- **descriptors run out** (EMFILE, ENFILE on accept): one connection is displaced in the same
  order and accepting goes on; with none to displace, accepting pauses for `ACCEPT_PAUSE`. One
  line is logged per `LOG_PERIOD` at most, with the count.

No connection is accepted once the graceful stop has stopped accepting: a batch under way ends
first, under its own lock.
"""

from __future__ import annotations

import errno
import resource
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.server.worker.budget import LOG_PERIOD
from app.server.worker.registry import READ, Registry

if TYPE_CHECKING:
    from app.server.worker.connection import Conn

#: The most connections one wake-up of a listener accepts (each displacing another at the cap).
ACCEPT_BATCH = 64
#: Descriptors kept for the app beside its connections (the store's and webhooks' sockets, files).
FD_RESERVE = 128
#: Out of descriptors with nothing to displace: accepting pauses this long.
ACCEPT_PAUSE = 0.5
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


#: The share of the connection cap that answers waiting for the feed (watches) may hold at most;
#: the rest, and at least one more than the request threads, is kept for every other request.
WATCH_SHARE = 0.9


def watch_limit(cap: int, threads: int) -> int:
    """The watches a worker holds at once: a parked watch is never displaced, so they may hold
    `WATCH_SHARE` of the cap, leaving at least `threads + 1` connections that a new client can
    displace (a request being served, at most one per thread, is not displaced either)."""
    return max(min(int(cap * WATCH_SHARE), cap - threads - 1), 0)


def connection_cap(asked: int, log: Any) -> tuple[int, int]:
    """The cap (`worker_connections`, lowered to fit the open-file limit) and the most
    connections, lingering ones included, the descriptors allow."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = 2 * asked if soft == resource.RLIM_INFINITY else max(soft - FD_RESERVE, 1)
    if asked > room:
        log.warning(
            "--worker-connections %s is more than the open-file limit of %s allows: this worker "
            "takes %s connections (%s descriptors are kept for the app). To take more, raise "
            "the limit: `ulimit -n` in the shell that starts gunicorn, or LimitNOFILE= in its "
            "systemd unit.",
            asked,
            soft,
            room,
            FD_RESERVE,
        )
    return min(asked, room), min(room, 2 * asked)


class Admission:
    """Takes new connections from the listeners into the registry; see the module docstring."""

    def __init__(
        self,
        registry: Registry,
        cap: tuple[int, int],
        connect: Callable[[socket.socket, Any, Any], Conn],
        first_wait: float,
        log: Any,
    ) -> None:
        self._registry = registry
        self.max_connections, self._fd_room = cap
        self._connect = connect  # a new connection's protocol (connection.py)
        self._first_wait = first_wait  # how long a new connection has for its first request
        self._log = log
        # Read once: a listener closed at exit has no name, and a connection accepted then is
        # still served.
        self._socknames = {fd: listener.getsockname() for fd, listener in registry.listeners.items()}
        # Held through an accept batch: once accepting has stopped and this is free, no
        # connection is accepted that the graceful stop does not see.
        self._accept_lock = threading.Lock()
        self._fd_failures = 0
        self._fd_logged_at = 0.0

    def start(self) -> None:
        with self._registry.lock:
            self._registry.set_accepting(True)

    def stop(self) -> None:
        """No connection is accepted after this returns (a batch under way has ended)."""
        with self._registry.lock:
            self._registry.set_accepting(False)
        with self._accept_lock:
            pass

    def accept(self, listener: socket.socket) -> None:
        """A listener's turn: accept what waits, then re-arm it."""
        registry = self._registry
        try:
            with self._accept_lock:
                self._accept_all(listener)
        finally:
            with registry.lock:
                if registry.accepting:
                    registry.epoll.modify(listener.fileno(), READ)

    def _accept_all(self, listener: socket.socket) -> None:
        registry = self._registry
        for _ in range(ACCEPT_BATCH):
            with registry.lock:
                if not registry.accepting:  # stopping, or paused: the next worker takes the client
                    return
            try:
                client_sock, client_addr = listener.accept()
            except OSError as e:
                if e.errno in _OUT_OF_DESCRIPTORS:
                    self._out_of_descriptors(e)
                elif e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                    self._log.exception("accept() failed")
                return
            client_sock.setblocking(False)
            conn = self._connect(client_sock, client_addr, self._socknames[listener.fileno()])
            conn.deadline = time.monotonic() + self._first_wait
            registry.add(conn)
            if not self._make_room(conn):
                return

    def _make_room(self, accepted: Conn) -> bool:
        """Past the cap with the connection just accepted, displace one other (never it): so N
        newcomers displace N connections at most. With none to displace, the worker holds one
        more than its cap until a connection closes, and accepting stops (False) till then."""
        registry = self._registry
        with registry.lock:
            counted = len(registry.conns) - registry.lingering
            if counted <= self.max_connections and len(registry.conns) <= self._fd_room:
                return True
            evicted = registry.evict(lingering=counted <= self.max_connections, spare=accepted)
            if evicted is None:
                registry.set_accepting(False)
                return False
        evicted.close()
        return True

    def _out_of_descriptors(self, error: OSError) -> None:
        """accept() found no descriptor: displace a connection for the next client, or with
        none to displace, stop accepting for `ACCEPT_PAUSE` (the listener would wake at once)."""
        now = time.monotonic()
        registry = self._registry
        with registry.lock:
            self._fd_failures += 1
            evicted = registry.evict(lingering=True)
            if evicted is None:
                registry.paused_until = now + ACCEPT_PAUSE  # the registry's `expired` resumes
                registry.set_accepting(False)
            log_now = now >= self._fd_logged_at + LOG_PERIOD
            if log_now:
                failures, self._fd_failures, self._fd_logged_at = self._fd_failures, 0, now
        if evicted is not None:
            evicted.close()
        if log_now:
            self._log.warning(
                "accept() failed %s times in %ss: %s (open-file limit %s, %s connections); "
                "connections are displaced, or accepting pauses %ss, until descriptors free up",
                failures,
                LOG_PERIOD,
                error.strerror,
                resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                len(registry.conns),
                ACCEPT_PAUSE,
            )
