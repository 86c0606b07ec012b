"""The worker's connection poller: request threads that share one epoll.

Every request thread waits on the same epoll, registered with `EPOLLONESHOT`: the kernel hands
each ready connection to exactly one thread, which serves one request and re-arms it. There is
no hand-off between a polling thread and a pool. A connection waiting for its next request, or
lingering after its last response, waits on the poller and holds no thread.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import threading
import time
from typing import Any

from gunicorn.workers import gthread

ARMED = select.EPOLLIN | select.EPOLLONESHOT
# How long, and for how many bytes, a connection closed after its response lingers for the
# client to close its side (as gunicorn's util.close_graceful).
_LINGER_SECONDS, _LINGER_BYTES = 2.0, 65536


class Conn(gthread.TConn):
    """A client connection; `busy` while a thread serves it, `deadline` while it is idle."""

    fd = -1  # kept: the socket's fileno() is -1 once it is closed
    busy = False
    closing = False
    draining = False
    drained = 0
    deadline = 0.0
    read_timeout: float = 10.0

    def init(self) -> None:
        # gthread.handle calls init() every time it takes the connection up, right after
        # making the socket blocking (which clears any timeout).
        super().init()
        self.sock.settimeout(self.read_timeout)


class Poller:
    """Accepting, dispatching and closing connections; a mixin for a gthread-based worker.

    The worker provides `cfg`, `log`, `alive`, `sockets`, `worker_connections`, `read_timeout`,
    and `_handle(conn) -> bool` (serve what the connection has; True to keep it open). A
    connection that is not kept open is closed by LingeringClose, below.
    """

    cfg: Any
    log: Any
    alive: bool
    sockets: list[socket.socket]
    worker_connections: int
    read_timeout: float

    def init_poller(self) -> None:
        self._epoll = select.epoll()
        self._lock = threading.Lock()
        self._conns: dict[int, Conn] = {}
        self._listeners = {listener.fileno(): listener for listener in self.sockets}
        self._accepting = False

    def _handle(self, conn: Conn) -> bool:
        raise NotImplementedError

    def _set_accepting(self, accepting: bool) -> None:
        # Called with self._lock held, in the same hold that counted the connections: a
        # connection closing between the count and the switch would otherwise find accepting
        # still on, and the listener would stay off with a free slot.
        if accepting == self._accepting:
            return
        self._accepting = accepting
        for fd in self._listeners:
            if accepting:
                self._epoll.register(fd, ARMED)
            else:
                self._epoll.unregister(fd)

    def _serve(self) -> None:
        poll = self._epoll.poll
        while True:
            try:
                events = poll(1.0, 1)
            except ValueError:  # the epoll is closed: the worker is exiting
                return
            except InterruptedError:
                continue
            for fd, _ in events:
                listener = self._listeners.get(fd)
                if listener is None:
                    self._serve_connection(fd)
                else:
                    try:
                        self._accept(listener)
                    except Exception:  # a request thread must outlive any one accept
                        self.log.exception("Error accepting a connection")

    def _accept(self, listener: socket.socket) -> None:
        try:
            self._accept_all(listener)
        finally:
            with self._lock:
                if self._accepting:
                    self._epoll.modify(listener.fileno(), ARMED)

    def _accept_all(self, listener: socket.socket) -> None:
        while True:
            try:
                client_sock, client_addr = listener.accept()
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                    self.log.exception("accept() failed")
                return
            conn = Conn(self.cfg, client_sock, client_addr, listener.getsockname())
            conn.read_timeout = self.read_timeout
            conn.deadline = time.monotonic() + max(self.cfg.keepalive, self.read_timeout)
            fd = conn.fd = client_sock.fileno()
            with self._lock:
                self._conns[fd] = conn
                full = len(self._conns) >= self.worker_connections
                if full:
                    self._set_accepting(False)  # back on when a connection closes
            self._epoll.register(fd, ARMED)
            if full:
                return

    def _serve_connection(self, fd: int) -> None:
        with self._lock:
            conn = self._conns.get(fd)
            if conn is None or conn.busy:
                return
            conn.busy = True
        try:
            if conn.closing:
                self._close(conn)
            elif conn.draining:
                self._drain(conn)
            elif self._handle(conn):
                self._rearm(conn, time.monotonic() + self.cfg.keepalive)
            else:
                self._close_gracefully(conn)
        except Exception:  # a request thread must outlive any one connection
            self.log.exception("Error serving a connection")
            with contextlib.suppress(Exception):
                self._close(conn)

    def _rearm(self, conn: Conn, deadline: float) -> None:
        """Hand the connection back to the poller, to be closed if still idle at `deadline`."""
        with self._lock:
            conn.busy = False
            conn.deadline = deadline
            if not self.alive:
                conn.deadline = min(deadline, time.monotonic() + gthread.STOP_KEEPALIVE_LINGER)
        # ValueError: the epoll is closed, because the graceful stop ran out of time.
        with contextlib.suppress(ValueError):
            self._epoll.modify(conn.fd, ARMED)

    def _close_idle(self) -> None:
        # Only the thread that takes a connection up closes it (and frees its fd). Here an idle
        # connection is shut down, which makes it readable, so a request thread closes it.
        now = time.monotonic()
        with self._lock:
            for conn in self._conns.values():
                if not conn.busy and not conn.closing and conn.deadline <= now:
                    conn.closing = True
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_RDWR)

    def _close(self, conn: Conn) -> None:
        # Forget the fd before closing it: once closed, its number can be reused by the next
        # accept. Closing twice is harmless; it never forgets another connection's fd.
        with self._lock:
            if self._conns.get(conn.fd) is conn:
                del self._conns[conn.fd]
                with contextlib.suppress(OSError, ValueError):
                    self._epoll.unregister(conn.fd)
                if self.alive:  # the graceful stop turns accepting off under this lock
                    self._set_accepting(True)
        conn.close()


class LingeringClose(Poller):
    """Closing a connection after its response as RFC 9112 section 9.6 asks, on the poller."""

    def _close_gracefully(self, conn: Conn) -> None:
        # RFC 9112 section 9.6: send FIN, then read and discard what the client still sends
        # until it closes, so that unread request bytes cannot make the kernel reset the
        # connection and cut off the response. Unlike gunicorn's close_graceful, the lingering
        # happens on the poller, so a client that never closes does not hold a thread.
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.draining = True
        self._rearm(conn, time.monotonic() + _LINGER_SECONDS)

    def _drain(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(_LINGER_BYTES, socket.MSG_DONTWAIT)
        except BlockingIOError:  # woken with nothing to read: keep lingering
            self._rearm(conn, conn.deadline)
            return
        except OSError:
            data = b""
        conn.drained += len(data)
        if data and conn.drained < _LINGER_BYTES:
            self._rearm(conn, conn.deadline)
        else:
            self._close(conn)
