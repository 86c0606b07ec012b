"""The gunicorn worker for the Plant Store service: gthread's request handling, a leaner loop.

`worker_class = "app.server.worker.ThreadWorker"` (app/server/gunicorn_conf.py). It reuses
gthread's per-request code (parsing, the WSGI call, error answers) and changes three things:

- **No hand-offs.** Request threads wait on one shared epoll themselves (app/server/poller.py).
  The main thread only sends the heartbeat, closes idle connections and runs the graceful stop.
- **One send per response.** The status line and headers go out with the first body bytes
  (app/server/response.py), so a small JSON answer is one TCP segment, not two.
- **Bounded reads.** Every socket read has a timeout (`read_timeout`): the stock gthread worker
  waits for ever on a client that stalls mid-request.

It also answers the requests gunicorn itself refuses with the service's JSON Error record
(app/server/refusals.py).
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import datetime

from gunicorn import util
from gunicorn.http import wsgi
from gunicorn.workers import base, gthread

from .poller import Conn, LingeringClose
from .refusals import StalledReadFilter, write_json_error
from .response import OneSendResponse


class ThreadWorker(LingeringClose, gthread.ThreadWorker):
    """`threads` request threads sharing one epoll; see the module docstring."""

    #: Seconds one read from a client socket may wait; the gunicorn configuration sets it.
    read_timeout: float = 10.0

    def init_process(self) -> None:
        self.log.error_log.addFilter(StalledReadFilter(self))
        util.write_error = write_json_error  # used by Worker.handle_error; this process only
        self.init_poller()
        # gthread's init_process would build its thread pool, selector and wake-up pipe.
        base.Worker.init_process(self)

    def handle_exit(self, sig, frame) -> None:  # type: ignore[no-untyped-def]
        self.alive = False

    def handle_quit(self, sig, frame) -> None:  # type: ignore[no-untyped-def]
        base.Worker.handle_quit(self, sig, frame)

    def run(self) -> None:
        for listener in self.sockets:
            listener.setblocking(False)
        with self._lock:
            self._set_accepting(True)
        for number in range(self.cfg.threads):
            threading.Thread(target=self._serve, name=f"request-{number}", daemon=True).start()

        while self.alive and self.is_parent_alive():
            self.notify()
            self._close_idle()
            time.sleep(0.5)

        # Graceful stop: no new connections; requests in flight finish; a kept-alive connection
        # stays open briefly for a request its client may already be sending, which is then
        # answered with "Connection: close".
        self.alive = False
        linger = time.monotonic() + gthread.STOP_KEEPALIVE_LINGER
        with self._lock:
            self._set_accepting(False)
            for conn in self._conns.values():
                conn.deadline = min(conn.deadline, linger)
        stop_by = time.monotonic() + self.cfg.graceful_timeout
        while self._conns and time.monotonic() < stop_by:
            self.notify()
            self._close_idle()
            time.sleep(0.05)
        self._epoll.close()
        for conn in list(self._conns.values()):
            conn.close()
        for listener in self.sockets:
            listener.close()

    def _handle(self, conn: Conn) -> bool:
        conn.data_ready = True  # the poller said so; gthread.handle must not wait again
        keepalive = self.handle(conn)
        # A body drain can read ahead into the next request: those bytes no longer make the
        # socket readable, so serve them now.
        while keepalive and conn.parser.unreader.buf.getvalue():
            keepalive = self.handle(conn)
        return bool(keepalive)

    def handle_request(self, req, conn) -> bool:  # type: ignore[no-untyped-def]
        # As gthread.ThreadWorker.handle_request, with _Response and this worker's bookkeeping.
        environ: dict = {}
        resp = None
        try:
            self.cfg.pre_request(self, req)
            request_start = datetime.now()
            resp, environ = wsgi.create(
                req, conn.sock, conn.client, conn.server, self.cfg, response_class=OneSendResponse
            )
            environ["wsgi.multithread"] = True
            self.nr += 1
            if self.nr >= self.max_requests and self.alive:
                self.log.info("Autorestarting worker after current request.")
                self.alive = False
            if not self.alive or not self.cfg.keepalive or len(self._conns) >= self.worker_connections:
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
        except OSError:
            util.reraise(*sys.exc_info())
        except (Exception, SystemExit):
            if resp and resp.headers_sent:
                self.log.exception("Error handling request")
                # gthread closes the socket here; this worker closes it (and forgets its fd)
                # in _close_gracefully, which handle() leads to on StopIteration.
                raise StopIteration() from None
            raise
        finally:
            try:
                self.cfg.post_request(self, req, environ, resp)
            except Exception:
                self.log.exception("Exception in post_request hook")
