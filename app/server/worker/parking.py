"""The worker's side of parking: answers that wait without a thread (the feed's long-polls and
streams), on the worker's epoll, until their wake-up, their deadline or their client leaving.

The interface an app's iterable offers, and the environ key by which the worker offers parking,
are defined once, in app/server/worker/interface.py.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from app.server.worker import refusals
from app.server.worker.connection import Conn, Request
from app.server.worker.connections import PARKED
from app.server.worker.connections import WRITE as WAKE
from app.server.worker.response import HOP_BY_HOP, Answer


@dataclass
class Parked:
    """An answer in progress on a connection."""

    iterable: Any
    answer: Answer
    request: Request
    environ: dict[str, Any]
    keep_alive: bool
    started: float
    head_sent: bool = False
    wake: Any = None

    @property
    def chunked(self) -> bool:
        return self.request.http == "1.1"

    def held(self) -> int:
        """The bytes of its answer collected so far (a long-poll's), against the memory budget."""
        return sum(len(chunk) for chunk in self.answer.chunks)


def parkable(result: Any) -> bool:
    """The app's iterable can wait (interface.Parkable): asked of every answer, so two look-ups,
    not a runtime protocol check."""
    return hasattr(result, "subscribe") and hasattr(result, "deadline")


class Parking:
    """The worker's side of parking; a mixin for the worker (which provides the poller)."""

    log: Any
    read_timeout: float
    _lock: Any
    _epoll: Any

    if TYPE_CHECKING:  # the worker's own, through its other bases

        def answer(self, conn: Conn, data: bytes, keep_alive: bool) -> None:
            raise NotImplementedError

        def _send(self, conn: Conn, data: bytes, *, close_after: bool) -> bool:
            raise NotImplementedError

        def _encode(self, parked: Parked) -> tuple[bytes, bool]:
            raise NotImplementedError

        def _account(self, conn: Conn) -> None:
            raise NotImplementedError

    def _step(self, conn: Conn) -> None:
        """Ask the parked iterable for what it has, on a connection this thread holds."""
        parked = conn.parked
        assert parked is not None
        streaming = parked.iterable.streaming
        out: list[bytes] = []
        try:
            while True:
                chunk = next(parked.iterable)
                if not chunk:
                    break
                if not streaming:
                    parked.answer.chunks.append(chunk)
                    continue
                # One chunk a turn: it goes out before the next is asked for, so a stream holds
                # at most one chunk here, and a long one waits its turn behind other connections.
                out.append(b"%x\r\n%s\r\n" % (len(chunk), chunk) if parked.chunked else chunk)
                if self._send_stream(conn, out):
                    self._yield_turn(conn)
                return  # else the rest waits for the socket, and the next step follows the flush
        except StopIteration:
            self._finish(conn, out)
            return
        except Exception:
            self.log.exception("Error in a waiting answer %s %s", parked.request.method, parked.request.path)
            self._finish(conn, out, failed=True)
            return
        if streaming and not self._send_stream(conn, out):
            return
        self._park(conn)

    def _yield_turn(self, conn: Conn) -> None:
        """Hand the connection back with its next step due at once, after the others' turns."""
        with self._lock:
            conn.woken = True
            conn.busy = False
            self._account(conn)
            # The step comes when the socket is writable: a client that takes nothing within the
            # read timeout is closed (connections.py), to reconnect from its last id.
            conn.deadline = time.monotonic() + self.read_timeout
            self._epoll_modify(conn, WAKE)

    def _send_stream(self, conn: Conn, out: list[bytes]) -> bool:
        parked = conn.parked
        assert parked is not None
        if not parked.head_sent:
            parked.head_sent = True
            out.insert(0, self._stream_head(parked))
        return not out or self._send(conn, b"".join(out), close_after=False)

    def _stream_head(self, parked: Parked) -> bytes:
        lines = [f"HTTP/1.1 {parked.answer.status}\r\n"]
        lines += [
            f"{name}: {value}\r\n"
            for name, value in parked.answer.headers
            if name.lower() != "content-length" and name.lower() not in HOP_BY_HOP
        ]
        # HTTP/1.0 has no chunked coding: its stream ends where the connection closes.
        lines.append("Transfer-Encoding: chunked\r\n" if parked.chunked else "")
        lines.append("Connection: close\r\n\r\n")
        return "".join(lines).encode("latin-1")

    def _park(self, conn: Conn) -> None:
        parked = conn.parked
        assert parked is not None
        conn.woken = False
        if parked.wake is None:  # one callable for every park: the signal keeps one entry
            parked.wake = partial(self._wake, conn)
        parked.iterable.subscribe(parked.wake)
        with self._lock:
            conn.deadline = parked.iterable.deadline()
            if conn.woken:  # woken meanwhile: its step waits only for the socket (_yield_turn)
                conn.deadline = time.monotonic() + self.read_timeout
            conn.busy = False
            self._account(conn)
            # EPOLLRDHUP alone: a client that leaves is noticed; one that sends more waits.
            events = WAKE if conn.woken else PARKED
            self._epoll_modify(conn, events)

    def _wake(self, conn: Conn) -> None:
        """From any thread: hand the parked connection to a request thread."""
        with self._lock:
            if conn.woken:
                return
            conn.woken = True
            if not conn.busy and conn.parked is not None:
                conn.deadline = time.monotonic() + self.read_timeout  # as in _yield_turn
                self._epoll_modify(conn, WAKE)

    def _epoll_modify(self, conn: Conn, events: int) -> None:
        with contextlib.suppress(OSError, ValueError):  # closed meanwhile
            self._epoll.modify(conn.fd, events)

    def _resume(self, conn: Conn) -> None:
        """A turn on a parked connection: woken, or its client left."""
        if conn.woken:
            self._step(conn)
        else:
            self._close(conn)

    def _finish(self, conn: Conn, out: list[bytes], failed: bool = False) -> None:
        parked = conn.parked
        assert parked is not None
        conn.parked = None
        self._close_iterable(parked)
        keep_alive = False
        if failed and not parked.head_sent:
            parked.answer.status = "500 Internal Server Error"
            data = refusals.encode(refusals.APP_ERROR)
        elif parked.iterable.streaming:
            if not parked.head_sent:
                out.insert(0, self._stream_head(parked))
            if not failed and parked.chunked:  # cut by an error, it ends without its last chunk
                out.append(b"0\r\n\r\n")
            data = b"".join(out)
        else:
            data, keep_alive = self._encode(parked)
        self._log_access(parked)
        self.answer(conn, data, keep_alive)

    def _close(self, conn: Conn) -> None:
        """Close the connection, and end its waiting answer if it has one (its watch's place is
        given back), whichever way the connection ends: its client left, a send failed, or a
        deadline passed."""
        parked = conn.parked
        conn.parked = None
        if parked is not None:
            self._close_iterable(parked)
        super()._close(conn)  # type: ignore[misc]

    def _close_iterable(self, parked: Parked) -> None:
        close = getattr(parked.iterable, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                self.log.exception("Error closing a waiting answer")

    def _log_access(self, parked: Parked) -> None:
        elapsed = timedelta(seconds=time.perf_counter() - parked.started)
        self.log.access(parked.answer, parked.request, parked.environ, elapsed)

    def _stop_parked(self, conns: list[Conn]) -> None:
        """The worker stops: every parked answer is asked to end now."""
        for conn in conns:
            parked = conn.parked
            if parked is not None:
                try:
                    parked.iterable.stop()
                except Exception:
                    self.log.exception("Error stopping a waiting answer")
                self._wake(conn)
