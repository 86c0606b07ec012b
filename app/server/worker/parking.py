"""Answers that wait without a thread (the feed's long-polls and streams), parked on the worker's
epoll until their wake-up, their deadline or their client leaving.

The worker puts `PARKING` (true) in the environ. An app that sees it may return an iterable that
can wait: besides `__next__` (`b""`: nothing yet) and `close`, it has `subscribe(wake)` (the
iterable calls `wake` once, from any thread, when it has something to give), `deadline()` (the
`time.monotonic()` by which the worker asks again anyway), `stop()` (the worker stops: end
promptly) and `streaming` (True: each chunk goes as it comes, chunked, then close; False: the whole
answer goes at its end). The service holds its own copy of this interface (app/watch/parkable.py,
its key kept equal by tests/unit/test_watch_parking.py), since neither imports the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from app.server.worker.connection import PARKED, WAKE
from app.server.worker.cycle import (
    APP_ERROR,
    LAST_CHUNK,
    Answer,
    Record,
    Request,
    close_result,
    encode_refusal,
    frame_chunk,
)

if TYPE_CHECKING:
    from app.server.worker.connection import Conn
    from app.server.worker.loop import Registry

#: The environ key by which the worker offers to park an answer.
PARKING = "plants.worker.parking"


@dataclass
class Parked:
    """An answer in progress on a connection."""

    iterable: Any  # the app's answer that can wait (the module docstring)
    answer: Answer
    request: Request
    environ: dict[str, Any]
    keep_alive: bool
    started: float
    record: Record  # the access line and post_request (cycle.py's `Recorder`)
    head_sent: bool = False
    wake: Any = None
    sent: int = 0  # a stream's bytes sent so far (its events), for the access line

    @property
    def chunked(self) -> bool:
        return self.request.http == "1.1"

    def held(self) -> int:
        """The bytes of its answer collected so far (a long-poll's), against the memory budget."""
        return sum(len(chunk) for chunk in self.answer.chunks)

    def close(self, log: Any) -> None:
        """End the waiting answer (its watch's place is given back)."""
        close_result(self.iterable, log)

    def left(self, log: Any) -> None:
        """The end of an answer its client left (or that timed out) before its end, recorded
        (access line, post_request) with the status it began with and the bytes sent, or nginx's
        499 when nothing was sent yet."""
        self.close(log)
        answer = self.answer
        if self.head_sent:
            answer.sent = self.sent
        else:
            answer.status, answer.sent = "499 Client Closed Request", 0
        self.record(answer, self.request, self.environ, self.started)

    def stream_head(self) -> bytes:
        """A stream's head, through `Answer.head` (its Date, its checks): the app's Content-Length
        is dropped, the stream is chunked (on HTTP/1.0 it ends where the connection closes)."""
        answer = self.answer
        answer.headers = [(name, value) for name, value in answer.headers if name.lower() != "content-length"]
        # "GET": the stream's framing is decided here and in `Parking.step`, never by the method.
        return answer.head("GET", False, None, http11=self.chunked).data


class Parking:
    """Steps, parks and wakes the waiting answers of a worker's connections."""

    def __init__(
        self, registry: Registry, log: Any, read_timeout: float, alive: Callable[[], bool], record: Record
    ) -> None:
        self._registry = registry
        self._record = record
        self._log = log
        self._read_timeout = read_timeout
        self._alive = alive

    def start(
        self,
        conn: Conn,
        iterable: Any,
        answer: Answer,
        request: Request,
        environ: dict[str, Any],
        keep_alive: bool,
        started: float,
    ) -> bool:
        """Park the app's answer on `conn`; False when the watches' share of the connections is full."""
        if not self._registry.admit_watch():
            return False
        conn.standing.park(Parked(iterable, answer, request, environ, keep_alive, started, self._record))
        if not self._alive():  # arrived during the graceful stop: it ends at once
            iterable.stop()
        self.step(conn)
        return True

    def step(self, conn: Conn) -> None:
        """Ask the parked iterable for what it has, on a connection this thread holds."""
        parked = conn.standing.parked
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
                out.append(frame_chunk(chunk) if parked.chunked else chunk)
                parked.sent += len(chunk)
                if self._send_stream(conn, out):
                    self._yield_turn(conn)
                return  # else the rest waits for the socket, and the next step follows the flush
        except StopIteration:
            self._finish(conn, out)
            return
        except Exception:
            self._log.exception("Error in a waiting answer %s %s", parked.request.method, parked.request.path)
            self._finish(conn, out, failed=True)
            return
        if streaming and not self._send_stream(conn, out):
            return
        self._park(conn)

    def _yield_turn(self, conn: Conn) -> None:
        """Hand the connection back with its next step due at once, after the others' turns."""
        registry = self._registry
        with registry.lock:
            conn.standing.mark_woken()
            conn.standing.hand_back()
            registry.budget.account(conn)
            # The step comes when the socket is writable: a client that takes nothing within the
            # read timeout is closed (loop.py), to reconnect from its last id.
            conn.standing.due_by(time.monotonic() + self._read_timeout)
            registry.modify(conn, WAKE)

    def _send_stream(self, conn: Conn, out: list[bytes]) -> bool:
        parked = conn.standing.parked
        assert parked is not None
        if not parked.head_sent:
            out.insert(0, parked.stream_head())  # a ValueError (a bad field) fails it with a 500
            parked.head_sent = True
        return not out or conn.outgoing.send(b"".join(out), close_after=False)

    def _park(self, conn: Conn) -> None:
        parked = conn.standing.parked
        assert parked is not None
        conn.standing.mark_woken(False)
        if parked.wake is None:  # one callable for every park: the signal keeps one entry
            parked.wake = partial(self.wake, conn)
        parked.iterable.subscribe(parked.wake)
        registry = self._registry
        with registry.lock:
            conn.standing.due_by(parked.iterable.deadline())
            if conn.standing.woken:  # woken meanwhile: its step waits only for the socket (_yield_turn)
                conn.standing.due_by(time.monotonic() + self._read_timeout)
            conn.standing.hand_back()
            registry.budget.account(conn)
            # EPOLLRDHUP alone: a client that leaves is noticed; one that sends more waits.
            registry.modify(conn, WAKE if conn.standing.woken else PARKED)

    def wake(self, conn: Conn) -> None:
        """From any thread: hand the parked connection to a request thread."""
        with self._registry.lock:
            if conn.standing.woken:
                return
            conn.standing.mark_woken()
            if not conn.standing.busy and conn.standing.parked is not None:
                conn.standing.due_by(time.monotonic() + self._read_timeout)  # as in _yield_turn
                self._registry.modify(conn, WAKE)

    def resume(self, conn: Conn) -> None:
        """A turn on a parked connection: woken, or its client left."""
        if conn.standing.woken:
            self.step(conn)
        else:
            conn.close()

    def _finish(self, conn: Conn, out: list[bytes], failed: bool = False) -> None:
        parked = self._registry.unpark(conn)
        assert parked is not None
        parked.close(self._log)
        keep_alive = False
        if parked.iterable.streaming and not parked.head_sent and not failed:
            try:
                out.insert(0, parked.stream_head())
                parked.head_sent = True
            except ValueError:
                self._log.exception("Error in a waiting answer's head %s", parked.request.path)
                failed = True
        if failed and not parked.head_sent:
            parked.answer.status = "500 Internal Server Error"
            data = encode_refusal(APP_ERROR)
        elif parked.iterable.streaming:
            if not failed and parked.chunked:  # cut by an error, it ends without its last chunk
                out.append(LAST_CHUNK)
            data = b"".join(out)
            parked.answer.sent = parked.sent
        else:
            data, keep_alive = parked.answer.encode(
                parked.request.method, parked.keep_alive and self._alive()
            )
        parked.record(parked.answer, parked.request, parked.environ, parked.started)
        conn.outgoing.answer(data, keep_alive)

    def stop(self, conns: list[Conn]) -> None:
        """The worker stops: every parked answer is asked to end now."""
        for conn in conns:
            parked = conn.standing.parked
            if parked is not None:
                try:
                    parked.iterable.stop()
                except Exception:
                    self._log.exception("Error stopping a waiting answer")
                self.wake(conn)
