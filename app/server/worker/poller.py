"""The worker's loop: request threads that share one epoll, and never wait on a client.

Every request thread waits on the same epoll, registered with `EPOLLONESHOT`: the kernel hands
each ready connection to exactly one thread, for one turn. A turn makes progress or closes:

- it reads once from the socket and feeds the bytes to the connection's parser
  (connection.py); end-of-file in the middle of a request closes the connection at once;
- once a request is whole, it serves that one request, in this thread, and sends the answer
  without blocking: what the client does not take at once waits on the epoll for the socket to
  become writable;
- a connection with more requests buffered (a pipelining client) is then armed for writing,
  which puts it at the back of the kernel's ready list: every other ready connection gets a
  turn before its next request is served.

So a slow client holds no thread, only its buffered bytes and its deadline (connections.py).
An answer can be completed later by any thread, through `answer(conn, data, keep_alive)`.
"""

from __future__ import annotations

import contextlib
import time
from select import EPOLLRDHUP
from typing import TYPE_CHECKING

from app.server.worker import refusals
from app.server.worker.connection import BODY, IDLE, Conn, Refusal, Request
from app.server.worker.connections import BYTES_PER_SECOND, READ, WRITE, Connections

_RECV_BYTES = 65536
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Poller(Connections):
    """Turns on connections; a mixin for the worker, which serves each whole request with
    `_serve_request(conn, request)`: (the answer's bytes, whether to keep the connection), or
    None when the answer waits (parking.py)."""

    if TYPE_CHECKING:  # the worker's own, through its other bases

        def _serve_request(self, conn: Conn, request: Request) -> tuple[bytes, bool] | None:
            raise NotImplementedError

        def _step(self, conn: Conn) -> None:
            raise NotImplementedError

        def _resume(self, conn: Conn) -> None:
            raise NotImplementedError

    def _serve(self) -> None:
        """A request thread's loop."""
        poll = self._epoll.poll
        while True:
            try:
                events = poll(1.0, 1)
            except ValueError:  # the epoll is closed: the worker is exiting
                return
            except InterruptedError:
                continue
            for fd, mask in events:
                listener = self._listeners.get(fd)
                try:
                    if listener is None:
                        self._turn(fd, mask)
                    else:
                        self._accept(listener)
                except Exception:  # a request thread must outlive any one connection
                    self.log.exception("Error serving a connection")

    def _turn(self, fd: int, mask: int) -> None:
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
            elif conn.parked is not None:
                self._resume(conn)
            elif conn.has_work or self._receive(conn, mask & EPOLLRDHUP):
                self._answer_next(conn)
        except Exception:
            with contextlib.suppress(Exception):
                self._close(conn)
            raise

    # --- reading ---------------------------------------------------------------------------------

    def _receive(self, conn: Conn, closed: int) -> bool:
        """Read once and parse; False when there is nothing to do (closed, or re-armed).
        `closed`: the client has closed its side, so what it sent is all there will be."""
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except BlockingIOError:
            self._rearm(conn, READ)
            return False
        except OSError:
            data = b""
        if not data:  # the client closed: a request it had begun can never be whole
            self._close(conn)
            return False
        now = time.monotonic()
        idle_deadline = conn.deadline
        if conn.phase == IDLE:  # a new request's first bytes: its head's deadline starts
            conn.deadline = now + self.read_timeout
        had_head = conn.phase == BODY
        conn.feed(data)
        if conn.phase == IDLE and not conn.has_work:  # only the empty lines llhttp skips
            conn.deadline = idle_deadline
            self._rest_idle(conn)
            return False
        if closed and not conn.has_work:
            self._close(conn)
            return False
        if conn.phase == BODY and not had_head and not conn.ready:
            conn.deadline = now + self.read_timeout + self.limits.body / BYTES_PER_SECOND
        return True

    # --- answering -------------------------------------------------------------------------------

    def _answer_next(self, conn: Conn) -> None:
        if not conn.ready and conn.unparsed and conn.refusal is None:
            conn.feed(b"")  # the rest of a pipelining client's bytes
            if conn.phase != IDLE:
                conn.deadline = time.monotonic() + self.read_timeout
        if conn.ready:
            request = conn.ready.popleft()
            served = self._serve_request(conn, request)
            if served is not None:  # else a waiting answer has the connection (parking.py)
                self.answer(conn, *served)
        elif conn.refusal is not None:
            self._refuse(conn, conn.refusal)
        else:
            self._await_more(conn)

    def _refuse(self, conn: Conn, refusal: Refusal) -> None:
        self.log.warning("Answered %s to a client: %s", refusal.status, refusal.message)
        self.answer(conn, refusals.encode(refusal), keep_alive=False)

    def answer(self, conn: Conn, data: bytes, keep_alive: bool) -> None:
        """Send an answer on a connection this thread holds (busy), then hand it back."""
        if self._send(conn, data, close_after=not keep_alive):
            self._after_answer(conn, keep_alive)

    def _after_answer(self, conn: Conn, keep_alive: bool) -> None:
        if conn.parked is not None:  # a stream's chunk went out: ask for the next
            self._step(conn)
        elif not keep_alive:
            self._close_gracefully(conn)
        elif conn.has_work:
            self._rearm(conn, WRITE)  # the socket is writable: back of the queue, not a spin
        else:
            self._await_more(conn)

    def _await_more(self, conn: Conn) -> None:
        if conn.phase == IDLE:
            self._rearm_idle(conn)
            return
        if conn.wants_continue:
            conn.wants_continue = False
            with contextlib.suppress(OSError):
                conn.sock.send(_CONTINUE)  # 25 bytes into an empty send buffer
        self._rearm(conn, READ)

    # --- writing ---------------------------------------------------------------------------------

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
        conn.deadline = time.monotonic() + self.read_timeout + len(conn.out) / BYTES_PER_SECOND
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
        self._after_answer(conn, not conn.close_after_out)
