"""The worker's connections: accepting them, the cap, their deadlines, and closing them.

- at `worker_connections`, a new client displaces the oldest idle connection; with none idle
  (or only some idle for less than a second), the one whose request is arriving slowest (fewest
  bytes a second since it began). A connection whose request is being served or answered is
  never displaced;
- an idle connection (between requests) is closed after the keep-alive time;
- a request's head must arrive within `read_timeout` of its first byte, and its body within
  `read_timeout` of the head (plus a second per 64 KiB): past either, 408 and close;
- an answer must be taken within the same time, or the connection is closed.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from app.server.worker import refusals
from app.server.worker.connection import Conn, Limits

#: EPOLLRDHUP: a client that closed after part of a request is closed in the same turn.
READ = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLONESHOT
WRITE = select.EPOLLOUT | select.EPOLLONESHOT
#: A parked answer's connection: woken by its client leaving (or, armed WRITE, by its `wake`).
PARKED = select.EPOLLRDHUP | select.EPOLLONESHOT
#: How long, and for how many bytes, a connection closed after its answer lingers for the client
#: to close its side (as gunicorn's util.close_graceful).
LINGER_SECONDS, LINGER_BYTES = 2.0, 65536
#: A slow client is given this many bytes a second on top of its deadline, for a large body or answer.
BYTES_PER_SECOND = 65536
#: How long a connection that has just connected, or been answered, is spared at the cap.
IDLE_GRACE = 1.0
#: The most connections one wake-up of a listener accepts (each displacing another at the cap).
ACCEPT_BATCH = 64


class Connections:
    """The registry of a worker's connections; a mixin for the poller.

    The worker provides `cfg`, `log`, `alive`, `sockets`, `read_timeout` and `limits`.
    """

    cfg: Any
    log: Any
    alive: bool
    sockets: list[socket.socket]
    read_timeout: float
    limits: Limits

    if TYPE_CHECKING:  # the worker's own, through its other bases

        def _wake(self, conn: Conn) -> None:
            raise NotImplementedError

    def init_connections(self) -> None:
        self._epoll = select.epoll()
        self._lock = threading.Lock()
        self._conns: dict[int, Conn] = {}
        # Idle connections, the longest idle first (a dict keeps insertion order).
        self._idle: dict[int, Conn] = {}
        self._listeners = {listener.fileno(): listener for listener in self.sockets}
        self._accepting = False

    def _set_accepting(self, accepting: bool) -> None:
        # Called with self._lock held.
        if accepting == self._accepting:
            return
        self._accepting = accepting
        for fd in self._listeners:
            if accepting:
                self._epoll.register(fd, READ)
            else:
                self._epoll.unregister(fd)

    def _accept(self, listener: socket.socket) -> None:
        try:
            self._accept_all(listener)
        finally:
            with self._lock:
                if self._accepting:
                    self._epoll.modify(listener.fileno(), READ)

    def _accept_all(self, listener: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            evicted = None
            with self._lock:
                if len(self._conns) >= self.cfg.worker_connections:
                    # At the cap, a waiting client (the listener woke us) takes another's place;
                    # with none to spare, accepting stops until a connection closes.
                    evicted = self._evict()
                    if evicted is None:
                        self._set_accepting(False)
                        return
            if evicted is not None:
                self._close(evicted)
            try:
                client_sock, client_addr = listener.accept()
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                    self.log.exception("accept() failed")
                return
            client_sock.setblocking(False)
            conn = Conn(client_sock, client_addr, listener.getsockname(), self.limits)
            conn.deadline = time.monotonic() + max(self.cfg.keepalive, self.read_timeout)
            with self._lock:
                conn.idle_since = time.monotonic()
                self._conns[conn.fd] = conn
                self._idle[conn.fd] = conn
            self._epoll.register(conn.fd, READ)

    def _evict(self) -> Conn | None:
        """Called with the lock held at the cap: the connection to close for a new one, taken up
        (busy), or None when every one has a whole request.

        The oldest idle one, unless it became idle within `IDLE_GRACE` (a client that has just
        connected has had no turn to send its request yet); then the one whose request arrives
        slowest; then the oldest idle one all the same."""
        now = time.monotonic()
        oldest = next(iter(self._idle.values()), None)
        victim = oldest if oldest is not None and oldest.idle_since + IDLE_GRACE <= now else None
        if victim is None:
            reading = [c for c in self._conns.values() if not c.busy and c.reading_request]
            victim = min(reading, key=lambda c: c.received / max(now - c.started, 0.001), default=oldest)
        if victim is not None:
            victim.busy = True
            self._idle.pop(victim.fd, None)
        return victim

    def _rearm(self, conn: Conn, events: int) -> None:
        with self._lock:
            conn.busy = False
        # ValueError: the epoll is closed, because the graceful stop ran out of time.
        with contextlib.suppress(ValueError, OSError):
            self._epoll.modify(conn.fd, events)

    def _rearm_idle(self, conn: Conn) -> None:
        deadline = time.monotonic() + self.cfg.keepalive
        with self._lock:
            if not self.alive:
                deadline = min(deadline, time.monotonic() + 2.0)
            conn.deadline = deadline
            conn.idle_since = time.monotonic()
            self._idle[conn.fd] = conn
        self._rearm(conn, READ)

    def _rest_idle(self, conn: Conn) -> None:
        """Back to the idle connections, its deadline and place unchanged."""
        with self._lock:
            self._idle[conn.fd] = conn
        self._rearm(conn, READ)

    def _expire(self) -> None:
        """Run by the main thread: act on every connection past its deadline."""
        now = time.monotonic()
        expired, due = [], []
        with self._lock:
            for conn in self._conns.values():
                if not conn.busy and conn.deadline <= now:
                    if conn.parked is not None and conn.out is None and not conn.woken:
                        due.append(conn)  # a waiting answer's deadline: ask it again
                        continue
                    conn.busy = True
                    self._idle.pop(conn.fd, None)
                    expired.append(conn)
        for conn in due:
            self._wake(conn)
        for conn in expired:
            try:
                if conn.reading_request:
                    # Too slow with its request: 408, then close as after any answer.
                    self.log.warning(
                        "Answered 408 to a client that did not send its whole request within %ss",
                        self.read_timeout,
                    )
                    with contextlib.suppress(OSError):
                        conn.sock.send(refusals.encode(refusals.TIMED_OUT))
                    self._close_gracefully(conn)
                else:  # idle, lingering, not taking its answer (a stream's included)
                    self._close(conn)
            except Exception:
                self.log.exception("Error closing a connection")

    def _close(self, conn: Conn) -> None:
        # Forget the fd before closing it: once closed, its number can be reused by the next
        # accept. Closing twice is harmless; it never forgets another connection's fd.
        with self._lock:
            if self._conns.get(conn.fd) is conn:
                del self._conns[conn.fd]
                self._idle.pop(conn.fd, None)
                with contextlib.suppress(OSError, ValueError):
                    self._epoll.unregister(conn.fd)
                if self.alive:  # the graceful stop turns accepting off under this lock
                    self._set_accepting(True)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _close_gracefully(self, conn: Conn) -> None:
        # RFC 9112 section 9.6: send FIN, then read and discard what the client still sends
        # until it closes, so that unread request bytes cannot make the kernel reset the
        # connection and cut off the answer. The lingering happens on the poller.
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.lingering = True
        conn.ready.clear()
        conn.unparsed = b""
        conn.deadline = time.monotonic() + LINGER_SECONDS
        self._rearm(conn, READ)

    def _drain(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(LINGER_BYTES)
        except BlockingIOError:  # woken with nothing to read: keep lingering
            self._rearm(conn, READ)
            return
        except OSError:
            data = b""
        conn.lingered += len(data)
        if data and conn.lingered < LINGER_BYTES:
            self._rearm(conn, READ)
        else:
            self._close(conn)
