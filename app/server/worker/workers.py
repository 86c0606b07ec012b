"""The gunicorn worker for the Plant Store service: request threads that never wait on a client.

`worker_class = "app.server.worker.PlantsWorker"` (app/server/gunicorn_conf.py), on gunicorn's
public worker API only, as uvicorn's `UvicornWorker`: `cfg`, `sockets`, `log`, `notify()`, `alive`,
`wsgi`, and the hooks and signals the base class sets up. Plain HTTP/1.1: TLS ends at the
reverse proxy.
"""

from __future__ import annotations

import os
import threading
import time
from functools import partial

from gunicorn.workers import base

from app.server.worker.connection import Conn, Context, RequestLimits
from app.server.worker.cycle import Serving
from app.server.worker.loop import STOP_LINGER, Admission, Budget, Registry, run_thread
from app.server.worker.parking import PARKING, Parking

#: The service's MAX_CONTENT_LENGTH when the app does not say (bytes).
DEFAULT_MAX_BODY = 64 * 1024
#: The longest request head (request line and header fields) the worker reads: nginx's default
#: `large_client_header_buffers` is 32 KiB in all.
MAX_HEAD = 64 * 1024


class PlantsWorker(base.Worker):
    """`threads` request threads sharing one epoll (its own name: `ThreadWorker` is gthread's)."""

    #: Seconds a client has to send a request's head, its body, or to take its answer
    #: (GUNICORN_READ_TIMEOUT, set by the packaged configuration's post_worker_init).
    read_timeout: float = 10.0
    #: Bytes (GUNICORN_MEMORY_BUDGET, in MiB, set by the packaged configuration's post_worker_init).
    memory_budget: int = 64 * 1024 * 1024

    def init_process(self) -> None:
        if self.cfg.is_ssl:
            # An error before the boot, not SystemExit: gunicorn's master then stops ("Worker failed
            # to boot"), where a worker that exits is started again, and again, at once.
            raise RuntimeError("Plant Store: this worker serves plain HTTP; end TLS at the reverse proxy.")
        super().init_process()

    def run(self) -> None:
        cfg, log = self.cfg, self.log
        alive = self._is_alive
        self.registry = Registry(alive, self.sockets, cfg.keepalive, Budget(self.memory_budget, log))
        self.admission = Admission(self.registry, cfg.worker_connections, cfg.threads, log)
        self.parking = Parking(self.registry, log, alive)
        cap = self.admission.max_connections
        self.serving = Serving(self, self.registry, self.parking.start, {PARKING: True}, cap)
        context = Context(
            self.registry, self.parking.step, self.serving.serve, log, self.read_timeout, self._limits()
        )
        for listener in self.sockets:
            listener.setblocking(False)
        self.admission.start(partial(Conn, context=context), max(cfg.keepalive, self.read_timeout))
        for number in range(cfg.threads):
            args = (self.registry, self.admission, log)
            threading.Thread(target=run_thread, args=args, name=f"request-{number}", daemon=True).start()

        while self.alive and self.ppid == os.getppid():
            self._beat(0.25)
        if self.alive:
            self.log.info("Parent changed, shutting down: %s", self)
        self._stop()

    def _is_alive(self) -> bool:
        return self.alive

    def _limits(self) -> RequestLimits:
        cfg = self.cfg
        line, fields, size = cfg.limit_request_line, cfg.limit_request_fields, cfg.limit_request_field_size
        # A request's head is buffered before a thread reads it, on every connection at once: at
        # most MAX_HEAD, or what gunicorn's limits allow if less.
        head = min(line + 2 + fields * (size + 2), MAX_HEAD)
        config = getattr(self.wsgi, "config", None)  # a Flask app says how large a body it takes
        body = int(config.get("MAX_CONTENT_LENGTH") or DEFAULT_MAX_BODY) if config else DEFAULT_MAX_BODY
        return RequestLimits(line, fields, size, head, body)

    def _beat(self, pause: float) -> None:
        """The main thread's round: the heartbeat, then every connection past its deadline."""
        self.notify()
        due, expired = self.registry.expired()
        for conn in due:
            self.registry.wake(conn)
        for conn in expired:
            try:
                conn.closing.time_out()
            except Exception:
                self.log.exception("Error closing a connection")
        time.sleep(pause)

    def _stop(self) -> None:
        # Graceful stop: no new connections; requests in flight finish; a kept-alive connection
        # stays open briefly for a request already on its way, answered with "Connection: close",
        # as are those a client pipelined, each in turn (the last with the close) for as long;
        # a parked answer ends now (a long-poll's page, a stream's end), and its client has as long
        # to take that end: one that takes nothing would otherwise hold the stop for the read
        # timeout, and a reload's handoff with it (no worker accepts meanwhile). Its client
        # resumes from the last event it took.
        self.alive = False
        linger = time.monotonic() + STOP_LINGER
        self.admission.stop()
        registry = self.registry
        with registry.lock:
            registry.answers_until = linger
            conns = list(registry.conns.values())
            for conn in conns:
                if conn.standing.parked is not None:
                    conn.standing.stop_by = linger
                conn.standing.deadline = min(conn.standing.deadline, linger)
        self.parking.stop(conns)
        stop_by = time.monotonic() + self.cfg.graceful_timeout
        while registry.conns and time.monotonic() < stop_by:
            self._beat(0.05)
        registry.epoll.close()
        for conn in list(registry.conns.values()):
            conn.sock.close()
        for listener in self.sockets:
            listener.close()
