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
An answer can be completed later by any thread, through `answer(conn, data, keep_alive)`. An
answer too large to hold whole (body.py) is sent as the client takes it: the rest of a file by
`os.sendfile`, the rest of an iterable a piece at a time, at most `TURN_BYTES` a turn.
"""

from __future__ import annotations

import contextlib
import time
from select import EPOLLRDHUP
from typing import TYPE_CHECKING

from app.server.worker import refusals
from app.server.worker.body import FileBody
from app.server.worker.connection import BODY, IDLE, Conn, Refusal, Request
from app.server.worker.connections import BYTES_PER_SECOND, READ, WRITE, Connections

_RECV_BYTES = 65536
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
#: The most of a large answer one turn sends before the connection goes to the back of the queue.
TURN_BYTES = 256 * 1024


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
            elif conn.out is not None or conn.body is not None:
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
        if conn.ready or conn.refusal is not None:
            conn.answer_started, conn.answer_sent = time.monotonic(), 0
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
        """Send an answer on a connection this thread holds (busy), then hand it back. Its body's
        rest, if it has one, is `conn.body`, sent as the client takes it."""
        body = conn.body
        if body is not None:
            # The whole answer is to be taken within the read timeout, plus a second per 64 KiB.
            size = len(data) + (body.left or 0)
            conn.deadline = time.monotonic() + self.read_timeout + size / BYTES_PER_SECOND
        if self._send(conn, data, close_after=not keep_alive) and (body is None or self._pump(conn)):
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
            sent = conn.sock.send(view) if view else 0
        except BlockingIOError:
            return 0
        except OSError:
            self._close(conn)
            return None
        conn.answer_sent += sent
        return sent

    def _send(self, conn: Conn, data: bytes, *, close_after: bool) -> bool:
        """Send what the socket takes now; True when all of it went. The rest waits on the poller."""
        view = memoryview(data)
        sent = self._send_now(conn, view)
        if sent is None:
            return False
        conn.close_after_out = close_after
        if sent == len(view):
            return True
        conn.out = view[sent:]
        if conn.body is None:
            conn.deadline = time.monotonic() + self.read_timeout + len(conn.out) / BYTES_PER_SECOND
        self._rearm(conn, WRITE)
        return False

    def _pump(self, conn: Conn) -> bool:
        """Send the rest of a large answer as the socket takes it, `TURN_BYTES` at most; True
        when it has all gone, False when it waits on the poller (or the connection is closed)."""
        body = conn.body
        turn = TURN_BYTES
        try:
            while turn > 0:
                if isinstance(body, FileBody):
                    if not body.left:
                        break
                    try:
                        taken = body.send(conn.fd, turn)
                    except BlockingIOError:
                        self._rearm(conn, WRITE)
                        return False
                    conn.answer_sent += taken
                    turn -= taken
                    continue
                piece = body.pull()
                if piece is None:
                    break
                turn -= len(piece)
                view = memoryview(piece)
                sent = self._send_now(conn, view)
                if sent is None:
                    return False
                if sent < len(view):
                    conn.out = view[sent:]
                    self._rearm(conn, WRITE)
                    return False
            else:  # its turn is up: the others' come first
                self._rearm(conn, WRITE)
                return False
        except OSError:  # the client has gone
            self._close(conn)
            return False
        except Exception:
            self.log.exception("Error sending an answer's body: the connection is closed")
            self._close(conn)
            return False
        conn.body = None
        self._close_body(body)
        return True

    def _flush(self, conn: Conn) -> None:
        out = conn.out
        if out is not None:
            sent = self._send_now(conn, out)
            if sent is None:
                return
            if sent < len(out):
                conn.out = out[sent:]
                self._rearm(conn, WRITE)
                return
            conn.out = None
        if conn.body is None or self._pump(conn):
            self._after_answer(conn, not conn.close_after_out)
