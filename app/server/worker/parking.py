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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.server.worker.connection import PARKED
from app.server.worker.cycle import APP_ERROR, LAST_CHUNK, Parked, close_result, encode_refusal, frame_chunk

if TYPE_CHECKING:
    from app.server.worker.connection import Conn
    from app.server.worker.loop import Registry

#: The environ key by which the worker offers to park an answer.
PARKING = "plants.worker.parking"


class Parking:
    """Parks, steps and ends the waiting answers of a worker's connections (`Registry.wake` wakes them)."""

    def __init__(self, registry: Registry, log: Any, alive: Callable[[], bool]) -> None:
        self._registry, self._log, self._alive = registry, log, alive

    def start(self, conn: Conn, parked: Parked) -> bool:
        """Park the app's answer on `conn`; False when the watches' share of the connections is full."""
        if not self._registry.park(conn, parked):
            return False
        if not self._alive():  # arrived during the graceful stop: it ends at once
            parked.iterable.stop()
        self.step(conn)
        return True

    def step(self, conn: Conn) -> None:
        """Ask the parked iterable for what it has, on a connection this thread holds (woken)."""
        parked = conn.standing.parked
        assert parked is not None
        streaming = parked.iterable.streaming
        out: list[bytes] = []
        try:
            chunk = next(parked.iterable, None)  # None: the end
            while chunk and not streaming:
                parked.answer.chunks.append(chunk)
                chunk = next(parked.iterable, None)
            if streaming and not parked.head_sent:
                # Through `Answer.head` (its Date, its checks), chunked whatever the method (on
                # HTTP/1.0 ended by the close); the app's Content-Length is dropped.
                answer = parked.answer
                answer.headers = [field for field in answer.headers if field[0].lower() != "content-length"]
                out.append(answer.head("GET", False, None, http11=parked.chunked).data)
                parked.head_sent = True
            if chunk:
                # One chunk a turn: it goes out before the next is asked for, so a stream holds
                # at most one chunk here, and a long one waits its turn behind other connections.
                out.append(frame_chunk(chunk) if parked.chunked else chunk)
                parked.streamed += len(chunk)
        except Exception:
            self._log.exception("Error in a waiting answer %s %s", parked.request.method, parked.request.path)
            self._finish(conn, out, failed=True)
            return
        if chunk is None:
            self._finish(conn, out)
            return
        if out and not conn.outgoing.send(b"".join(out), close_after=False):
            return  # the rest waits for the socket, and the next step follows the flush
        if chunk:  # the next step is due at once, after the other connections' turns
            conn.standing.woken = True
        else:
            conn.standing.woken = False
            parked.iterable.subscribe(parked.wake)
            conn.standing.deadline = parked.iterable.deadline()
        # EPOLLRDHUP alone: a client that leaves is noticed; one that sends more waits.
        self._registry.rearm(conn, PARKED)

    def _finish(self, conn: Conn, out: list[bytes], failed: bool = False) -> None:
        parked = self._registry.unpark(conn)
        assert parked is not None
        close_result(parked.iterable, self._log)
        answer, keep_alive = parked.answer, False
        if failed and not parked.head_sent:
            answer.status = "500 Internal Server Error"
            data = encode_refusal(APP_ERROR)
        elif parked.iterable.streaming:
            if not failed and parked.chunked:  # cut by an error, it ends without its last chunk
                out.append(LAST_CHUNK)
            data = b"".join(out)
            answer.sent = parked.streamed
        else:
            keep_alive = parked.keep_alive and (self._alive() or self._registry.owes_answers(conn))
            data, keep_alive = answer.encode(parked.request.method, keep_alive)
        parked.record(answer, parked.request, parked.environ, parked.started)
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
                self._registry.wake(conn)
