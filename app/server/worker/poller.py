"""The worker's connection poller: request threads that share one epoll, and never wait on a client.

Every request thread waits on the same epoll, registered with `EPOLLONESHOT`: the kernel hands
each ready connection to exactly one thread. That thread reads what the socket has, without
blocking, and serves a request only once all of it is there (app/server/framing.py). It writes
the answer without blocking too: what the client does not take at once waits on the poller for
the socket to become writable. So a client that sends, or reads, slowly holds no thread; it
holds only its buffered bytes, and its deadline:

- an idle connection (between requests) is closed after the keep-alive time;
- a request's head must arrive within `read_timeout` of its first byte, and its body within
  `read_timeout` of the head (plus a second per 64 KiB): past either, 408 and close;
- an answer must be taken within the same time, or the connection is closed;
- at `worker_connections`, a new connection closes the oldest idle one (then the oldest whose
  head is still arriving), so idle sockets can never lock a new client out.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import threading
import time
from typing import Any

from app.server.worker.framing import Extent, request_extent

READ = select.EPOLLIN | select.EPOLLONESHOT
WRITE = select.EPOLLOUT | select.EPOLLONESHOT
#: How long, and for how many bytes, a connection closed after its response lingers for the
#: client to close its side (as gunicorn's util.close_graceful).
LINGER_SECONDS, LINGER_BYTES = 2.0, 65536
#: A slow client is given this many bytes a second on top of its deadline, for a large body or answer.
_BYTES_PER_SECOND = 65536
_RECV_BYTES = 65536
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Conn:
    """A client connection and what the poller knows of it. `busy` while one thread has it."""

    def __init__(self, sock: socket.socket, client: Any, server: Any) -> None:
        self.sock = sock
        self.fd = sock.fileno()  # kept: fileno() is -1 once the socket is closed
        self.client = client
        self.server = server
        self.inbuf = bytearray()
        self.out: memoryview | None = None
        self.close_after_out = False
        self.busy = False
        self.lingering = False
        self.lingered = 0
        self.continued = False  # sent 100 Continue for the request being read
        self.head_done = False
        self.deadline = 0.0

    @property
    def reading_request(self) -> bool:
        """Part of a request has come, and not all of it."""
        return bool(self.inbuf) and self.out is None and not self.lingering


class Poller:
    """Accepting, reading, writing and closing connections; a mixin for the worker.

    The worker provides `cfg`, `log`, `alive`, `sockets`, `worker_connections`, `read_timeout`,
    `max_head`, `max_body`, `_serve_request(conn, raw, close) -> (answer, keep_alive)`,
    `_timed_out(conn) -> bytes` (the 408 to send to a client too slow with its request) and
    `_head_too_large(conn) -> bytes` (the 431 of a head longer than `max_head`).
    """

    cfg: Any
    log: Any
    alive: bool
    sockets: list[socket.socket]
    worker_connections: int
    read_timeout: float
    max_head: int
    max_body: int

    def _serve_request(self, conn: Conn, raw: bytes, close: bool) -> tuple[bytes, bool]:
        raise NotImplementedError

    def _timed_out(self, conn: Conn) -> bytes:
        raise NotImplementedError

    def _head_too_large(self, conn: Conn) -> bytes:
        raise NotImplementedError

    def init_poller(self) -> None:
        self._epoll = select.epoll()
        self._lock = threading.Lock()
        self._conns: dict[int, Conn] = {}
        # Idle connections, the longest idle first (a dict keeps insertion order).
        self._idle: dict[int, Conn] = {}
        self._listeners = {listener.fileno(): listener for listener in self.sockets}
        self._accepting = False

    # --- the request threads' loop --------------------------------------------------------------

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
                try:
                    if listener is None:
                        self._serve_connection(fd)
                    else:
                        self._accept(listener)
                except Exception:  # a request thread must outlive any one connection
                    self.log.exception("Error serving a connection")

    def _serve_connection(self, fd: int) -> None:
        with self._lock:
            conn = self._conns.get(fd)
            if conn is None or conn.busy:
                return
            conn.busy = True
            self._idle.pop(fd, None)
        try:
            if conn.lingering:
                self._drain(conn)
            elif conn.out is not None:
                self._flush(conn)
            else:
                self._read(conn)
        except Exception:
            with contextlib.suppress(Exception):
                self._close(conn)
            raise

    # --- accepting ------------------------------------------------------------------------------

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
        first = True
        while True:
            evicted = None
            with self._lock:
                if len(self._conns) >= self.worker_connections:
                    # At the cap, a waiting client (the listener woke us) takes an idle one's place;
                    # with none to spare, accepting stops until a connection closes.
                    evicted = self._evict() if first else None
                    if evicted is None:
                        if first:
                            self._set_accepting(False)
                        return
            first = False
            if evicted is not None:
                self._close(evicted)
            try:
                client_sock, client_addr = listener.accept()
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                    self.log.exception("accept() failed")
                return
            client_sock.setblocking(False)
            conn = Conn(client_sock, client_addr, listener.getsockname())
            conn.deadline = time.monotonic() + max(self.cfg.keepalive, self.read_timeout)
            with self._lock:
                self._conns[conn.fd] = conn
                self._idle[conn.fd] = conn
            self._epoll.register(conn.fd, READ)

    def _evict(self) -> Conn | None:
        """Called with the lock held at the cap: the connection to close for a new one, taken up
        (busy), or None when every one is serving, answering or reading a body."""
        victim = next(iter(self._idle.values()), None)
        if victim is None:
            victim = next(
                (c for c in self._conns.values() if not c.busy and c.reading_request and not c.head_done),
                None,
            )
        if victim is not None:
            victim.busy = True
            self._idle.pop(victim.fd, None)
        return victim

    # --- reading and serving --------------------------------------------------------------------

    def _read(self, conn: Conn) -> None:
        now = time.monotonic()
        limit = self.max_head + self.max_body + _RECV_BYTES
        while len(conn.inbuf) < limit:
            try:
                data = conn.sock.recv(_RECV_BYTES)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                if conn.inbuf:  # it closed its side after sending: answer what is whole first
                    break
                self._close(conn)
                return
            if not conn.inbuf:  # a new request's first bytes: its head's deadline starts
                conn.deadline = now + self.read_timeout
            conn.inbuf += data
            if len(data) < _RECV_BYTES:
                break
        self._serve_buffered(conn)

    def _serve_buffered(self, conn: Conn) -> None:
        """Serve every whole request the connection has buffered, in order, while its answers go
        out at once; then hand it back to the poller."""
        while True:
            if not conn.inbuf:
                self._rearm_idle(conn)
                return
            extent = request_extent(conn.inbuf, self.max_head, self.max_body)
            if not extent.size:
                self._await_rest(conn, extent)
                return
            raw = bytes(conn.inbuf[: extent.size])
            del conn.inbuf[: extent.size]
            conn.head_done = conn.continued = False
            if extent.head_too_large:
                answer, keep_alive = self._head_too_large(conn), False
            else:
                answer, keep_alive = self._serve_request(conn, raw, extent.close)
            if not keep_alive:
                conn.inbuf.clear()
            if not self._send(conn, answer, close_after=not keep_alive):
                return
            if not keep_alive:
                self._close_gracefully(conn)
                return
            conn.deadline = time.monotonic() + self.read_timeout

    def _await_rest(self, conn: Conn, extent: Extent) -> None:
        if extent.head_done and not conn.head_done:
            conn.head_done = True
            conn.deadline = time.monotonic() + self.read_timeout + self.max_body / _BYTES_PER_SECOND
            if extent.expects_continue and not conn.continued:
                conn.continued = True
                with contextlib.suppress(OSError):
                    conn.sock.send(_CONTINUE)  # 25 bytes into an empty send buffer
        self._rearm(conn, READ)

    def _rearm_idle(self, conn: Conn) -> None:
        conn.deadline = time.monotonic() + self.cfg.keepalive
        with self._lock:
            if not self.alive:
                conn.deadline = min(conn.deadline, time.monotonic() + 2.0)
            self._idle[conn.fd] = conn
        self._rearm(conn, READ)

    # --- writing --------------------------------------------------------------------------------

    def _send_now(self, conn: Conn, view: memoryview) -> int | None:
        """What the socket takes of `view` without waiting; None when the connection is gone
        (then closed)."""
        try:
            return conn.sock.send(view) if view else 0
        except BlockingIOError:
            return 0
        except OSError:
            self._close(conn)
            return None

    def _send(self, conn: Conn, data: bytes, *, close_after: bool) -> bool:
        """Send what the socket takes now; True when all of it went. The rest waits on the poller."""
        view = memoryview(data)
        sent = self._send_now(conn, view)
        if sent is None:
            return False
        if sent == len(view):
            return True
        conn.out = view[sent:]
        conn.close_after_out = close_after
        conn.deadline = time.monotonic() + self.read_timeout + len(conn.out) / _BYTES_PER_SECOND
        self._rearm(conn, WRITE)
        return False

    def _flush(self, conn: Conn) -> None:
        out = conn.out
        assert out is not None
        sent = self._send_now(conn, out)
        if sent is None:
            return
        if sent < len(out):
            conn.out = out[sent:]
            self._rearm(conn, WRITE)
            return
        conn.out = None
        if conn.close_after_out:
            self._close_gracefully(conn)
        else:
            conn.deadline = time.monotonic() + self.read_timeout
            self._serve_buffered(conn)  # a pipelined request may be waiting

    # --- handing back, deadlines and closing ------------------------------------------------------

    def _rearm(self, conn: Conn, events: int) -> None:
        with self._lock:
            conn.busy = False
        # ValueError: the epoll is closed, because the graceful stop ran out of time.
        with contextlib.suppress(ValueError, OSError):
            self._epoll.modify(conn.fd, events)

    def _expire(self) -> None:
        """Run by the main thread: act on every connection past its deadline."""
        now = time.monotonic()
        expired = []
        with self._lock:
            for conn in self._conns.values():
                if not conn.busy and conn.deadline <= now:
                    conn.busy = True
                    self._idle.pop(conn.fd, None)
                    expired.append(conn)
        for conn in expired:
            try:
                if conn.reading_request:
                    # Too slow with its request: 408, then close as after any answer.
                    with contextlib.suppress(OSError):
                        conn.sock.send(self._timed_out(conn))
                    self._close_gracefully(conn)
                else:  # idle, lingering, or not taking its answer
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
        # connection and cut off the response. The lingering happens on the poller.
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.lingering = True
        conn.inbuf.clear()
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
