"""The gunicorn worker for the Plant Store service: request threads that never wait on a client.

`worker_class = "app.server.worker.ThreadWorker"` (app/server/gunicorn_conf.py). It is a
gunicorn `Worker` with its own connection handling (app/server/poller.py), and gunicorn's own
HTTP parser and WSGI environ for each request:

- **No slow client holds a thread.** Sockets are non-blocking. A request thread takes a request
  only once all of it has arrived, reads it from memory, and leaves an answer that the client
  does not take at once to the poller. Heads, bodies and answers have deadlines (408 and close).
- **No hand-offs.** Request threads wait on one shared epoll themselves. The main thread only
  sends the heartbeat, closes connections past their deadlines and runs the graceful stop.
- **One send per response.** The status line, headers and body go out in one write, so a small
  JSON answer is one TCP segment, not two.

It also answers the requests gunicorn itself refuses with the service's JSON Error record
(app/server/refusals.py). It serves plain HTTP/1.1: TLS ends at the reverse proxy.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime
from typing import Any

from gunicorn import http, util
from gunicorn.http import wsgi
from gunicorn.workers import base

from app.server.worker.poller import Conn, Poller
from app.server.worker.refusals import head_too_large_answer, timed_out_answer, write_json_error
from app.server.worker.response import BufferedResponse, ResponseBuffer

#: The service's MAX_CONTENT_LENGTH when the app does not say (bytes).
DEFAULT_MAX_BODY = 64 * 1024
#: The longest request head (request line and header fields) the worker reads: nginx's default
#: `large_client_header_buffers` is 32 KiB in all.
MAX_HEAD = 64 * 1024
#: How long a stopping worker keeps an idle connection for a request already on its way.
_STOP_LINGER = 2.0


class ThreadWorker(Poller, base.Worker):
    """`threads` request threads sharing one epoll; see the module docstring."""

    #: Seconds a client has to send a request's head, its body, or to take its answer.
    read_timeout: float = 10.0
    #: The longest body read before the request is served (the app's MAX_CONTENT_LENGTH).
    max_body: int = DEFAULT_MAX_BODY

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.worker_connections = self.cfg.worker_connections
        # A request's head is buffered before a thread reads it, on every connection at once: at
        # most MAX_HEAD (or what gunicorn's limits allow, if less), so that 1,000 connections
        # cannot make the worker hold more than a few hundred MB.
        limits = self.cfg.limit_request_line + 2
        limits += self.cfg.limit_request_fields * (self.cfg.limit_request_field_size + 2)
        self.max_head = min(limits, MAX_HEAD) if limits > 0 else MAX_HEAD

    def init_process(self) -> None:
        if self.cfg.is_ssl:
            raise SystemExit("Plant Store: this worker serves plain HTTP; end TLS at the reverse proxy.")
        util.write_error = write_json_error  # used by Worker.handle_error; this process only
        self.init_poller()
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        config = getattr(self.wsgi, "config", None)  # a Flask app says how large a body it takes
        if config is not None and config.get("MAX_CONTENT_LENGTH"):
            self.max_body = int(config["MAX_CONTENT_LENGTH"])

    def handle_exit(self, sig, frame) -> None:  # type: ignore[no-untyped-def]
        self.alive = False

    def is_parent_alive(self) -> bool:
        if self.ppid != os.getppid():
            self.log.info("Parent changed, shutting down: %s", self)
            return False
        return True

    def run(self) -> None:
        for listener in self.sockets:
            listener.setblocking(False)
        with self._lock:
            self._set_accepting(True)
        for number in range(self.cfg.threads):
            threading.Thread(target=self._serve, name=f"request-{number}", daemon=True).start()

        while self.alive and self.is_parent_alive():
            self.notify()
            self._expire()
            time.sleep(0.25)

        # Graceful stop: no new connections; requests in flight finish; a kept-alive connection
        # stays open briefly for a request its client may already be sending, which is then
        # answered with "Connection: close".
        self.alive = False
        linger = time.monotonic() + _STOP_LINGER
        with self._lock:
            self._set_accepting(False)
            for conn in self._conns.values():
                conn.deadline = min(conn.deadline, linger)
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

    def _timed_out(self, conn: Conn) -> bytes:
        self.log.warning(
            "Answered 408 to a client that did not send its whole request within %ss", self.read_timeout
        )
        return timed_out_answer()

    def _head_too_large(self, conn: Conn) -> bytes:
        self.log.warning("Answered 431 to a client whose request head passed %s bytes", self.max_head)
        return head_too_large_answer(self.max_head)

    def _serve_request(self, conn: Conn, raw: bytes, close: bool) -> tuple[bytes, bool]:
        """Serve one whole request read from memory: (the answer's bytes, whether to keep the
        connection). `close`: its body was not all read, so the connection closes after it."""
        out = ResponseBuffer()
        parser = http.get_parser(self.cfg, [raw], conn.client)
        req = None
        try:
            req = next(parser)
            keep_alive = self.handle_request(req, conn, out, close)
        except (http.errors.NoMoreData, StopIteration):
            keep_alive = False
        except Exception as e:
            self.handle_error(req, out, conn.client, e)
            keep_alive = False
        return out.getvalue(), keep_alive and self.alive

    def handle_request(self, req: Any, conn: Conn, out: ResponseBuffer, close: bool) -> bool:
        # As gthread.ThreadWorker.handle_request, writing into `out`.
        environ: dict = {}
        resp = None
        try:
            self.cfg.pre_request(self, req)
            request_start = datetime.now()
            resp, environ = wsgi.create(
                req, out, conn.client, conn.server, self.cfg, response_class=BufferedResponse
            )
            environ["wsgi.multithread"] = True
            self.nr += 1
            if self.nr >= self.max_requests and self.alive:
                self.log.info("Autorestarting worker after current request.")
                self.alive = False
            if (
                close
                or not self.alive
                or not self.cfg.keepalive
                or len(self._conns) >= self.worker_connections
            ):
                resp.force_close()

            respiter = self.wsgi(environ, resp.start_response)
            try:
                for item in respiter:
                    resp.write(item)
                resp.close()
            finally:
                self.log.access(resp, req, environ, datetime.now() - request_start)
                if hasattr(respiter, "close"):
                    respiter.close()
            return not resp.should_close()
        except (Exception, SystemExit):
            if resp and resp.headers_sent:
                # The head is already in `out`: an error answer cannot follow it. Close after it.
                self.log.exception("Error handling request")
                return False
            raise
        finally:
            try:
                self.cfg.post_request(self, req, environ, resp)
            except Exception:
                self.log.exception("Exception in post_request hook")
