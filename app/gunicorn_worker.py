"""A gunicorn gthread worker whose socket reads cannot block a thread for ever.

The stock gthread worker bounds only the wait for a request's first byte. Once
that byte arrives, the request line, headers and body are read with blocking
calls and no timeout, so a client that stalls mid-request holds a worker thread
until it disconnects. This worker gives every connection a read timeout
(`read_timeout`, set from gunicorn.conf.py) each time a thread takes it up:
a stalled read fails after that many seconds and the connection is closed.

It also answers the requests gunicorn itself refuses (malformed HTTP, request
line or headers over the limits) with the service's JSON Error record instead
of gunicorn's HTML page.
"""

from __future__ import annotations

import errno
import json
import logging

from gunicorn import util
from gunicorn.workers import gthread


def write_json_error(sock, status_int: int, reason: str, mesg: str) -> None:
    """Stands in for gunicorn.util.write_error in the worker process.

    `mesg` is left out: it can quote the request's bytes, headers included.
    """
    body = json.dumps(
        {
            "error": status_int,
            "message": f"{reason}: the HTTP server refused the request before the service saw it.",
        }
    ).encode("ascii")
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    util.write_nonblock(sock, head.encode("latin-1") + body)


class _TimedConn(gthread.TConn):
    read_timeout: float = 10.0

    def init(self) -> None:
        # The worker calls init() every time a thread takes the connection up,
        # right after making the socket blocking (which clears any timeout).
        super().init()
        self.sock.settimeout(self.read_timeout)


class _StalledReadFilter(logging.Filter):
    """Turns gthread's traceback for a read timeout into one line: stalled clients can be many."""

    def __init__(self, worker: ThreadWorker) -> None:
        super().__init__()
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], TimeoutError):
            record.msg = "Closed a connection whose client sent nothing for %ss mid-request"
            record.args = (self.worker.read_timeout,)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class ThreadWorker(gthread.ThreadWorker):
    """gthread with a per-read timeout; use `worker_class = "app.gunicorn_worker.ThreadWorker"`."""

    #: Seconds one read from a client socket may wait; gunicorn.conf.py sets it.
    read_timeout: float = 10.0

    def init_process(self) -> None:
        self.log.error_log.addFilter(_StalledReadFilter(self))
        util.write_error = write_json_error  # used by Worker.handle_error; this process only
        super().init_process()

    def accept(self, listener):  # type: ignore[no-untyped-def]
        # As gthread.ThreadWorker.accept, with _TimedConn for TConn.
        try:
            client_sock, client_addr = listener.accept()
            self.nr_conns += 1
            client_sock.setblocking(True)
            conn = _TimedConn(self.cfg, client_sock, client_addr, listener.getsockname())
            conn.read_timeout = self.read_timeout
            self.enqueue_req(conn)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
