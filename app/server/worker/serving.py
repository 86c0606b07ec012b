"""Running the app for one whole request (`Serving`, one per worker): its environ, gunicorn's
`pre_request` and `post_request` hooks, the access log, and the answer's bytes.

An answer is encoded whole when it is small (answer.py). One too large to hold, or a file,
leaves its rest as the connection's `outgoing.body`, sent as the client takes it (answer.py). An
iterable that can wait is parked instead (parking.py). An app error before anything was sent is
the JSON 500 (reader.py's refusals), and the connection closes.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from app.server.worker.answer import HOLD_BYTES, Answer, FileBody, HttpDate, IterBody, close_body
from app.server.worker.environ import EnvironBuilder
from app.server.worker.loop import Registry
from app.server.worker.parking import Parked, Parking, parkable
from app.server.worker.reader import APP_ERROR, Refusal, Request, encode_refusal, watches_full

if TYPE_CHECKING:
    from app.server.worker.connection import Conn


class Serving:
    """Serves whole requests for a gunicorn worker (`worker`: its `cfg`, `log`, `wsgi`, `alive`
    and `max_requests`, and what the hooks are handed)."""

    def __init__(
        self, worker: Any, registry: Registry, parking: Parking, date: HttpDate, max_connections: int
    ) -> None:
        self._worker = worker
        self._registry = registry
        self._parking = parking
        self._date = date
        self._max_connections = max_connections
        cfg = worker.cfg
        self.environs = EnvironBuilder(cfg, multithread=cfg.threads > 1)
        self.requests_served = 0
        # Read once: each of gunicorn's settings is a lookup and a validation on every read.
        self._app = worker.wsgi
        self._log = worker.log
        self._pre_request, self._post_request = cfg.pre_request, cfg.post_request
        self._keepalive = cfg.keepalive > 0
        self._max_requests = worker.max_requests

    def serve(self, conn: Conn, request: Request) -> tuple[bytes, bool] | None:
        """Run the app for one whole request: the answer's bytes, and whether to keep the
        connection; None when the answer waits in the loop (parking.py)."""
        try:
            environ = self.environs.build(conn, request)
        except Refusal as refusal:
            return encode_refusal(refusal), False
        worker = self._worker
        log = self._log
        answer = Answer()
        started = time.perf_counter()
        self._pre_request(worker, request)
        self.requests_served += 1
        if self.requests_served >= self._max_requests and worker.alive:
            log.info("Autorestarting worker after current request.")
            worker.alive = False
        keep_alive = request.keep_alive and self._keepalive and worker.alive
        registry = self._registry
        keep_alive = keep_alive and len(registry.conns) - registry.lingering < self._max_connections
        try:
            result = self._app(environ, answer.start_response)
            if parkable(result):
                if registry.admit_watch():
                    conn.park(Parked(result, answer, request, environ, keep_alive, started))
                    if not worker.alive:  # arrived during the graceful stop: it ends at once
                        result.stop()
                    self._parking.step(conn)
                    return None
                _close(result)  # its place in the app's own count is given back
                data, keep_alive = self._refuse(answer, watches_full(registry.watch_limit))
            else:
                data, keep_alive = self._produce(conn, request, answer, result, keep_alive)
        except Exception:
            registry.unpark(conn)
            conn.drop_body()
            log.exception("Error handling request %s %s", request.method, request.path)
            data, keep_alive = self._refuse(answer, APP_ERROR)
        log.access(answer, request, environ, timedelta(seconds=time.perf_counter() - started))
        try:
            self._post_request(worker, request, environ, answer)
        except Exception:
            log.exception("Exception in post_request hook")
        return data, keep_alive

    @staticmethod
    def _refuse(answer: Answer, refusal: Refusal) -> tuple[bytes, bool]:
        """The worker's own answer in place of the app's (the access line reads `answer`)."""
        data = encode_refusal(refusal)
        answer.status, answer.headers = f"{refusal.status} {refusal.reason}", []
        answer.sent = len(data) - data.index(b"\r\n\r\n") - 4
        return data, False

    def _produce(
        self, conn: Conn, request: Request, answer: Answer, result: Any, keep_alive: bool
    ) -> tuple[bytes, bool]:
        """The answer's first bytes (all of them, unless it is large), and whether to keep the
        connection; the rest of a large answer becomes `conn.outgoing.body`, sent as the client
        takes it."""
        date = self._date.now()
        method = request.method
        file = FileBody.of(result)
        if file is not None:
            try:
                head = answer.head(method, keep_alive, date, file.left)
            except BaseException:
                close_body(file, self._worker.log)
                raise
            answer.sent = file.left if head.sends_body else 0
            if head.sends_body and file.left:
                conn.attach_body(file)
            else:
                close_body(file, self._worker.log)
            return head.data, head.keep_alive
        chunks, held, whole = answer.chunks, 0, True
        iterator = iter(result)
        try:
            for chunk in iterator:
                if chunk:
                    chunks.append(chunk)
                    held += len(chunk)
                    if held > HOLD_BYTES:
                        whole = False
                        break
        except BaseException:
            _close(result)
            raise
        if whole:
            _close(result)
            return answer.encode(method, keep_alive, date)
        # Too large to hold: what came so far goes now, the rest as the client takes it.
        head = answer.head(method, keep_alive, date, None, http11=request.http == "1.1")
        first = b"".join(chunks)
        left = None if head.declared is None else head.declared - len(first)
        if not head.sends_body or (left is not None and left < 0):
            _close(result)
            if head.sends_body:
                raise ValueError(f"the app declared Content-Length {head.declared} for a longer body")
            answer.sent = 0
            return head.data, head.keep_alive
        answer.sent = head.declared
        conn.attach_body(IterBody(iterator, getattr(result, "close", None), head.chunked, left))
        if head.chunked:
            first = b"%x\r\n%s\r\n" % (len(first), first)
        return head.data + first, head.keep_alive


def _close(result: Any) -> None:
    close = getattr(result, "close", None)
    if close is not None:
        close()
