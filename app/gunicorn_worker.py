"""The gunicorn worker for the Plant Store service: gthread's request handling, a leaner loop.

`worker_class = "app.gunicorn_worker.ThreadWorker"` (gunicorn.conf.py). It reuses gthread's
per-request code (parsing, the WSGI call, error answers) and changes three things:

- **No hand-offs.** gthread's main thread polls, submits each ready connection to a thread pool,
  and is woken through a pipe to take the connection back. Here every request thread waits on one
  shared epoll itself, with `EPOLLONESHOT`: the kernel hands each ready connection to exactly one
  thread, which serves one request and re-arms it. The main thread only sends the heartbeat,
  closes idle connections and runs the graceful stop.
- **One send per response.** The status line and headers go out with the first body bytes, so a
  small JSON answer is one TCP segment, not two.
- **Bounded reads.** Every socket read has a timeout (`read_timeout`): the stock gthread worker
  waits for ever on a client that stalls mid-request. A connection waiting for its next request
  waits on the poller and holds no thread.

It also answers the requests gunicorn itself refuses (malformed HTTP, request line or headers
over the limits) with the service's JSON Error record instead of gunicorn's HTML page.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import select
import socket
import sys
import threading
import time
from datetime import datetime

from gunicorn import util
from gunicorn.http import wsgi
from gunicorn.workers import base, gthread

_ARMED = select.EPOLLIN | select.EPOLLONESHOT
# How long, and for how many bytes, a connection closed after its response lingers for the
# client to close its side (as gunicorn's util.close_graceful).
_LINGER_SECONDS, _LINGER_BYTES = 2.0, 65536


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


class _Response(wsgi.Response):
    """gunicorn's Response, holding the head back until the first body bytes go out with it."""

    _head: bytes | None = None

    def send_headers(self) -> None:
        if self.headers_sent or self._head is not None:
            return
        lines = self.default_headers()
        lines.extend([f"{name}: {value}\r\n" for name, value in self.headers])
        self._head = f"{''.join(lines)}\r\n".encode("latin-1")

    def _flush_head(self) -> bytes:
        head, self._head = self._head or b"", None
        self.headers_sent = True
        return head

    def _emit_body(self, data: bytes) -> None:
        if self.headers_sent or self.chunked:
            if not self.headers_sent:
                self.sock.sendall(self._flush_head())
            super()._emit_body(data)
        else:
            self.sock.sendall(self._flush_head() + data)

    def can_sendfile(self) -> bool:
        return False  # sendfile would write around the held-back head

    def close(self) -> None:
        self.send_headers()
        if not self.headers_sent:
            self.sock.sendall(self._flush_head())
        super().close()


class _Conn(gthread.TConn):
    """A client connection; `busy` while a thread serves it, `deadline` while it is idle."""

    fd = -1  # kept: the socket's fileno() is -1 once it is closed
    busy = False
    closing = False
    draining = False
    drained = 0
    deadline = 0.0
    read_timeout: float = 10.0

    def init(self) -> None:
        # gthread.handle calls init() every time it takes the connection up, right after
        # making the socket blocking (which clears any timeout).
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
    """`threads` request threads sharing one epoll; see the module docstring."""

    #: Seconds one read from a client socket may wait; gunicorn.conf.py sets it.
    read_timeout: float = 10.0

    def init_process(self) -> None:
        self.log.error_log.addFilter(_StalledReadFilter(self))
        util.write_error = write_json_error  # used by Worker.handle_error; this process only
        self._epoll = select.epoll()
        self._lock = threading.Lock()
        self._conns: dict[int, _Conn] = {}
        self._listeners = {listener.fileno(): listener for listener in self.sockets}
        self._accepting = False
        # gthread's init_process would build its thread pool, selector and wake-up pipe.
        base.Worker.init_process(self)

    def handle_exit(self, sig, frame) -> None:  # type: ignore[no-untyped-def]
        self.alive = False

    def handle_quit(self, sig, frame) -> None:  # type: ignore[no-untyped-def]
        base.Worker.handle_quit(self, sig, frame)

    # --- the main thread: heartbeat, idle connections, graceful stop -------------------------

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

    def _close_idle(self) -> None:
        # Only the thread that takes a connection up closes it (and frees its fd). Here an idle
        # connection is shut down, which makes it readable, so a request thread closes it.
        now = time.monotonic()
        with self._lock:
            for conn in self._conns.values():
                if not conn.busy and not conn.closing and conn.deadline <= now:
                    conn.closing = True
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_RDWR)

    def _set_accepting(self, accepting: bool) -> None:
        # Called with self._lock held, in the same hold that counted the connections: a
        # connection closing between the count and the switch would otherwise find accepting
        # still on, and the listener would stay off with a free slot.
        if accepting == self._accepting:
            return
        self._accepting = accepting
        for fd in self._listeners:
            if accepting:
                self._epoll.register(fd, _ARMED)
            else:
                self._epoll.unregister(fd)

    # --- the request threads ------------------------------------------------------------------

    def _serve(self) -> None:
        poll = self._epoll.poll
        while True:
            try:
                events = poll(1.0, 1)
            except ValueError:  # the epoll is closed: the worker is exiting
                return
            except InterruptedError:
                continue
            for fd, _ in events:
                listener = self._listeners.get(fd)
                if listener is None:
                    self._serve_connection(fd)
                else:
                    try:
                        self._accept(listener)
                    except Exception:  # a request thread must outlive any one accept
                        self.log.exception("Error accepting a connection")

    def _accept(self, listener: socket.socket) -> None:
        try:
            self._accept_all(listener)
        finally:
            with self._lock:
                if self._accepting:
                    self._epoll.modify(listener.fileno(), _ARMED)

    def _accept_all(self, listener: socket.socket) -> None:
        while True:
            try:
                client_sock, client_addr = listener.accept()
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                    self.log.exception("accept() failed")
                return
            conn = _Conn(self.cfg, client_sock, client_addr, listener.getsockname())
            conn.read_timeout = self.read_timeout
            conn.deadline = time.monotonic() + max(self.cfg.keepalive, self.read_timeout)
            fd = conn.fd = client_sock.fileno()
            with self._lock:
                self._conns[fd] = conn
                full = len(self._conns) >= self.worker_connections
                if full:
                    self._set_accepting(False)  # back on when a connection closes
            self._epoll.register(fd, _ARMED)
            if full:
                return

    def _serve_connection(self, fd: int) -> None:
        with self._lock:
            conn = self._conns.get(fd)
            if conn is None or conn.busy:
                return
            conn.busy = True
        try:
            if conn.closing:
                self._close(conn)
            elif conn.draining:
                self._drain(conn)
            elif self._handle(conn):
                self._rearm(conn, time.monotonic() + self.cfg.keepalive)
            else:
                self._close_gracefully(conn)
        except Exception:  # a request thread must outlive any one connection
            self.log.exception("Error serving a connection")
            with contextlib.suppress(Exception):
                self._close(conn)

    def _rearm(self, conn: _Conn, deadline: float) -> None:
        """Hand the connection back to the poller, to be closed if still idle at `deadline`."""
        with self._lock:
            conn.busy = False
            conn.deadline = deadline
            if not self.alive:
                conn.deadline = min(deadline, time.monotonic() + gthread.STOP_KEEPALIVE_LINGER)
        # ValueError: the epoll is closed, because the graceful stop ran out of time.
        with contextlib.suppress(ValueError):
            self._epoll.modify(conn.fd, _ARMED)

    def _handle(self, conn: _Conn) -> bool:
        conn.data_ready = True  # the poller said so; gthread.handle must not wait again
        keepalive = self.handle(conn)
        # A body drain can read ahead into the next request: those bytes no longer make the
        # socket readable, so serve them now.
        while keepalive and conn.parser.unreader.buf.getvalue():
            keepalive = self.handle(conn)
        return bool(keepalive)

    def _close_gracefully(self, conn: _Conn) -> None:
        # RFC 9112 section 9.6: send FIN, then read and discard what the client still sends
        # until it closes, so that unread request bytes cannot make the kernel reset the
        # connection and cut off the response. Unlike gunicorn's close_graceful, the lingering
        # happens on the poller, so a client that never closes does not hold a thread.
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.draining = True
        self._rearm(conn, time.monotonic() + _LINGER_SECONDS)

    def _drain(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(_LINGER_BYTES, socket.MSG_DONTWAIT)
        except BlockingIOError:  # woken with nothing to read: keep lingering
            self._rearm(conn, conn.deadline)
            return
        except OSError:
            data = b""
        conn.drained += len(data)
        if data and conn.drained < _LINGER_BYTES:
            self._rearm(conn, conn.deadline)
        else:
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        # Forget the fd before closing it: once closed, its number can be reused by the next
        # accept. Closing twice is harmless; it never forgets another connection's fd.
        with self._lock:
            if self._conns.get(conn.fd) is conn:
                del self._conns[conn.fd]
                with contextlib.suppress(OSError, ValueError):
                    self._epoll.unregister(conn.fd)
                if self.alive:  # the graceful stop turns accepting off under this lock
                    self._set_accepting(True)
        conn.close()

    def handle_request(self, req, conn) -> bool:  # type: ignore[no-untyped-def]
        # As gthread.ThreadWorker.handle_request, with _Response and this worker's bookkeeping.
        environ: dict = {}
        resp = None
        try:
            self.cfg.pre_request(self, req)
            request_start = datetime.now()
            resp, environ = wsgi.create(
                req, conn.sock, conn.client, conn.server, self.cfg, response_class=_Response
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
