"""The gunicorn worker for the Plant Store service: request threads that never wait on a client.

`worker_class = "app.server.worker.ThreadWorker"` (app/server/gunicorn_conf.py). It is a gunicorn
worker class on gunicorn's public worker API only, as uvicorn's `UvicornWorker` is: it uses the
settings (`cfg`), the listening `sockets`, `log`, `notify()`, `alive`, the loaded `wsgi` app, and
gunicorn's server hooks and signal handling as the base class sets them up. Everything between
the socket and the app is its own, on httptools:

- **One parser.** llhttp frames every request, once, as its bytes arrive (connection.py); the
  WSGI environ is built from that reading (environ.py). Framing errors are a JSON 400 and close.
- **No slow client holds a thread.** Sockets are non-blocking; a request thread takes a request
  only once all of it has arrived, and leaves an answer that the client does not take at once
  to the epoll (poller.py). Heads, bodies and answers have deadlines (408 and close).
- **Fair.** One request per connection per turn; a pipelining client waits its turn.
- **One send per answer.** Status line, headers and body go out in one write (response.py).

It serves plain HTTP/1.1: TLS ends at the reverse proxy.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from typing import Any

from gunicorn.workers import base

from app.server.worker import refusals
from app.server.worker.body import HOLD_BYTES, FileBody, IterBody
from app.server.worker.connection import Conn, Limits, Refusal, Request
from app.server.worker.environ import EnvironBuilder
from app.server.worker.parking import Parked, Parking, parkable
from app.server.worker.poller import Poller
from app.server.worker.response import Answer, HttpDate

#: The service's MAX_CONTENT_LENGTH when the app does not say (bytes).
DEFAULT_MAX_BODY = 64 * 1024
#: The longest request head (request line and header fields) the worker reads: nginx's default
#: `large_client_header_buffers` is 32 KiB in all.
MAX_HEAD = 64 * 1024
#: How long a stopping worker keeps an idle connection for a request already on its way.
_STOP_LINGER = 2.0


class ThreadWorker(Parking, Poller, base.Worker):
    """`threads` request threads sharing one epoll; see the module docstring."""

    #: Seconds a client has to send a request's head, its body, or to take its answer
    #: (GUNICORN_READ_TIMEOUT, set by the packaged configuration's post_worker_init).
    read_timeout: float = 10.0

    def init_process(self) -> None:
        if self.cfg.is_ssl:
            raise SystemExit("Plant Store: this worker serves plain HTTP; end TLS at the reverse proxy.")
        super().init_process()

    def run(self) -> None:
        self.limits = self._limits()
        self.environs = EnvironBuilder(self.cfg, multithread=self.cfg.threads > 1)
        self.date = HttpDate()
        self.requests_served = 0
        self.init_connections()
        for listener in self.sockets:
            listener.setblocking(False)
        with self._lock:
            self._set_accepting(True)
        for number in range(self.cfg.threads):
            threading.Thread(target=self._serve, name=f"request-{number}", daemon=True).start()

        while self.alive and self.ppid == os.getppid():
            self.notify()
            self._expire()
            time.sleep(0.25)
        if self.alive:
            self.log.info("Parent changed, shutting down: %s", self)
        self._stop()

    def _limits(self) -> Limits:
        cfg = self.cfg
        # A request's head is buffered before a thread reads it, on every connection at once: at
        # most MAX_HEAD (or what gunicorn's limits allow, if less), so that 1,000 connections
        # cannot make the worker hold more than a few hundred MB.
        head = cfg.limit_request_line + 2 + cfg.limit_request_fields * (cfg.limit_request_field_size + 2)
        config = getattr(self.wsgi, "config", None)  # a Flask app says how large a body it takes
        body = int(config.get("MAX_CONTENT_LENGTH") or DEFAULT_MAX_BODY) if config else DEFAULT_MAX_BODY
        return Limits(
            cfg.limit_request_line,
            cfg.limit_request_fields,
            cfg.limit_request_field_size,
            min(head, MAX_HEAD) if head > 0 else MAX_HEAD,
            body,
        )

    def _encode(self, parked: Parked) -> tuple[bytes, bool]:
        keep_alive = parked.keep_alive and self.alive
        return parked.answer.encode(parked.request.method, keep_alive, self.date.now())

    def _stop(self) -> None:
        # Graceful stop: no new connections; requests in flight finish; a kept-alive connection
        # stays open briefly for a request its client may already be sending, which is then
        # answered with "Connection: close".
        self.alive = False
        linger = time.monotonic() + _STOP_LINGER
        self._stop_accepting()
        with self._lock:
            waiting = [conn for conn in self._conns.values() if conn.parked is not None]
            for conn in self._conns.values():
                if conn.parked is None:
                    conn.deadline = min(conn.deadline, linger)
        self._stop_parked(waiting)  # each ends its answer now: a long-poll's page, a stream's end
        stop_by = time.monotonic() + self.cfg.graceful_timeout
        while self._conns and time.monotonic() < stop_by:
            self.notify()
            self._expire()
            time.sleep(0.05)
        self._epoll.close()
        for conn in list(self._conns.values()):
            conn.sock.close()
        for listener in self.sockets:
            listener.close()

    def _serve_request(self, conn: Conn, request: Request) -> tuple[bytes, bool] | None:
        """Run the app for one whole request: the answer's bytes, and whether to keep the
        connection; None when the answer waits in the loop (parking.py)."""
        try:
            environ = self.environs.build(conn, request)
        except Refusal as refusal:
            return refusals.encode(refusal), False
        cfg = self.cfg
        answer = Answer()
        started = time.perf_counter()
        cfg.pre_request(self, request)
        self.requests_served += 1
        if self.requests_served >= self.max_requests and self.alive:
            self.log.info("Autorestarting worker after current request.")
            self.alive = False
        keep_alive = request.keep_alive and self.alive and cfg.keepalive > 0
        keep_alive = keep_alive and len(self._conns) - self._lingering < self.max_connections
        try:
            result = self.wsgi(environ, answer.start_response)
            if parkable(result):
                conn.parked = Parked(result, answer, request, environ, keep_alive, started)
                if not self.alive:  # arrived during the graceful stop: it ends at once
                    result.stop()
                self._step(conn)
                return None
            data, keep_alive = self._produce(conn, request, answer, result, keep_alive)
        except Exception:
            conn.parked = None
            if conn.body is not None:
                body, conn.body = conn.body, None
                self._close_body(body)
            self.log.exception("Error handling request %s %s", request.method, request.path)
            answer.status, answer.headers, answer.sent = "500 Internal Server Error", [], None
            data, keep_alive = refusals.encode(refusals.APP_ERROR), False
        self.log.access(answer, request, environ, timedelta(seconds=time.perf_counter() - started))
        try:
            cfg.post_request(self, request, environ, answer)
        except Exception:
            self.log.exception("Exception in post_request hook")
        return data, keep_alive

    def _produce(
        self, conn: Conn, request: Request, answer: Answer, result: Any, keep_alive: bool
    ) -> tuple[bytes, bool]:
        """The answer's first bytes (all of them, unless it is large), and whether to keep the
        connection; the rest of a large answer becomes `conn.body`, sent as the client takes it."""
        date = self.date.now()
        method = request.method
        file = FileBody.of(result)
        if file is not None:
            try:
                head = answer.head(method, keep_alive, date, file.left)
            except BaseException:
                self._close_body(file)
                raise
            answer.sent = file.left if head.sends_body else 0
            if head.sends_body and file.left:
                conn.body = file
            else:
                self._close_body(file)
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
        conn.body = IterBody(iterator, getattr(result, "close", None), head.chunked, left)
        if head.chunked:
            first = b"%x\r\n%s\r\n" % (len(first), first)
        return head.data + first, head.keep_alive


def _close(result: Any) -> None:
    close = getattr(result, "close", None)
    if close is not None:
        close()
