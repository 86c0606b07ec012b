"""The worker's connections: accepting them, the cap, the memory budget, deadlines, closing.

- **The cap.** At most `worker_connections` connections (lowered at start to what the open-file
  limit allows, with one line that says so); a connection lingering after its close does not
  count against it (those are bounded apart, and displaced first when descriptors run short);
- **the memory budget** (`memory_budget`, GUNICORN_MEMORY_BUDGET): the bytes the worker holds
  for its clients, all connections together: unparsed and parsed request bytes, unsent answer
  bytes, a waiting answer's collected pieces (`Conn.holding()`);
- at the cap, a new client displaces the connection making the least progress, and past the
  budget, connections holding bytes are displaced in the same order until it holds again
  (displacement.py: a lingering close first, then an idle one or the slowest in bytes a second);
- **descriptors run out** (EMFILE, ENFILE on accept): one connection is displaced in the same
  order and accepting goes on; with none to displace, accepting pauses for `ACCEPT_PAUSE`. One
  line is logged per `FD_LOG_PERIOD` at most, with the count;
- an idle connection (between requests) is closed after the keep-alive time;
- a request's head must arrive within `read_timeout` of its first byte, and its body within
  `read_timeout` of the head (plus a second per 64 KiB): past either, 408 and close;
- an answer must be taken within the same time (plus a second per 64 KiB of it), or the
  connection is closed.
"""

from __future__ import annotations

import contextlib
import errno
import resource
import select
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from app.server.worker import refusals
from app.server.worker.connection import Conn, Limits
from app.server.worker.displacement import IDLE_GRACE, least_progress, to_fit

#: EPOLLRDHUP: a client that closed after part of a request is closed in the same turn.
READ = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLONESHOT
WRITE = select.EPOLLOUT | select.EPOLLONESHOT
#: A parked answer's connection: woken by its client leaving (or, armed WRITE, by its `wake`).
PARKED = select.EPOLLRDHUP | select.EPOLLONESHOT
#: How long, and for how many bytes, a connection closed after its answer lingers for the client
#: to close its side (as gunicorn's util.close_graceful).
LINGER_SECONDS, LINGER_BYTES = 2.0, 65536
#: A slow client is given this many bytes a second on top of its deadline, for a large body or answer.
BYTES_PER_SECOND = 65536
#: The most connections one wake-up of a listener accepts (each displacing another at the cap).
ACCEPT_BATCH = 64
#: The default memory budget of a worker (GUNICORN_MEMORY_BUDGET is in MiB).
MEMORY_BUDGET = 64 * 1024 * 1024
#: Descriptors kept for the app beside its connections (the store's and webhooks' sockets, files).
FD_RESERVE = 128
#: Out of descriptors with nothing to displace: accepting pauses this long. One line is logged
#: per period at most, for descriptors and for the budget each.
ACCEPT_PAUSE, FD_LOG_PERIOD = 0.5, 5.0
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Connections:
    """The registry of a worker's connections; a mixin for the poller.

    The worker provides `cfg`, `log`, `alive`, `sockets`, `read_timeout` and `limits`.
    """

    cfg: Any
    log: Any
    alive: bool
    sockets: list[socket.socket]
    read_timeout: float
    limits: Limits
    #: Bytes (GUNICORN_MEMORY_BUDGET, set by the packaged configuration's post_worker_init).
    memory_budget: int = MEMORY_BUDGET

    if TYPE_CHECKING:  # the worker's own, through its other bases

        def _wake(self, conn: Conn) -> None:
            raise NotImplementedError

    def init_connections(self) -> None:
        self._epoll = select.epoll()
        self._lock = threading.Lock()
        self._conns: dict[int, Conn] = {}
        # Idle connections, the longest idle first (a dict keeps insertion order).
        self._idle: dict[int, Conn] = {}
        self._listeners = {listener.fileno(): listener for listener in self.sockets}
        # Read once: a listener closed at exit has no name, and a connection accepted then is
        # still served.
        self._socknames = {fd: listener.getsockname() for fd, listener in self._listeners.items()}
        # Held through an accept batch: once accepting has stopped and this is free, no
        # connection is accepted that the graceful stop does not see.
        self._accept_lock = threading.Lock()
        self._accepting = False
        self._held = 0  # the bytes held for every connection (Conn.holding()), as last counted
        self._lingering = 0
        self.max_connections, self._fd_room = self._connection_cap()
        self._paused_until = 0.0  # out of descriptors: no accepting before this
        self._fd_failures = 0
        self._fd_logged_at = 0.0
        self._budget_logged_at, self._budget_displaced = 0.0, 0

    def _connection_cap(self) -> tuple[int, int]:
        """The cap (`worker_connections`, lowered to fit the open-file limit) and the most
        connections, lingering ones included, the descriptors allow."""
        asked = self.cfg.worker_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        room = 2 * asked if soft == resource.RLIM_INFINITY else max(soft - FD_RESERVE, 1)
        if asked > room:
            self.log.warning(
                "--worker-connections %s is more than the open-file limit of %s allows: this worker "
                "takes %s connections (%s descriptors are kept for the app). To take more, raise "
                "the limit: `ulimit -n` in the shell that starts gunicorn, or LimitNOFILE= in its "
                "systemd unit.",
                asked,
                soft,
                room,
                FD_RESERVE,
            )
        return min(asked, room), min(room, 2 * asked)

    def _stop_accepting(self) -> None:
        """No connection is accepted after this returns (a batch under way has ended)."""
        with self._lock:
            self._set_accepting(False)
        with self._accept_lock:
            pass

    def _set_accepting(self, accepting: bool) -> None:
        # Called with self._lock held.
        if accepting and self._paused_until:
            if time.monotonic() < self._paused_until:
                return  # out of descriptors: _expire resumes
            self._paused_until = 0.0
        if accepting == self._accepting:
            return
        self._accepting = accepting
        for fd in self._listeners:
            if accepting:
                self._epoll.register(fd, READ)
            else:
                self._epoll.unregister(fd)

    def _accept(self, listener: socket.socket) -> None:
        try:
            with self._accept_lock:
                self._accept_all(listener)
        finally:
            with self._lock:
                if self._accepting:
                    self._epoll.modify(listener.fileno(), READ)

    def _accept_all(self, listener: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            evicted = None
            with self._lock:
                if not self._accepting:  # stopping, or paused: the next worker takes the client
                    return
                counted = len(self._conns) - self._lingering
                if counted >= self.max_connections or len(self._conns) >= self._fd_room:
                    # At the cap, a waiting client (the listener woke us) takes another's place;
                    # with none to spare, accepting stops until a connection closes.
                    evicted = self._evict(lingering=counted < self.max_connections)
                    if evicted is None:
                        self._set_accepting(False)
                        return
            if evicted is not None:
                self._close(evicted)
            try:
                client_sock, client_addr = listener.accept()
            except OSError as e:
                if e.errno in _OUT_OF_DESCRIPTORS:
                    self._out_of_descriptors(e)
                elif e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                    self.log.exception("accept() failed")
                return
            client_sock.setblocking(False)
            conn = Conn(client_sock, client_addr, self._socknames[listener.fileno()], self.limits)
            conn.deadline = time.monotonic() + max(self.cfg.keepalive, self.read_timeout)
            with self._lock:
                conn.idle_since = time.monotonic()
                self._conns[conn.fd] = conn
                self._idle[conn.fd] = conn
            self._epoll.register(conn.fd, READ)

    def _out_of_descriptors(self, error: OSError) -> None:
        """accept() found no descriptor: displace a connection for the next client, or with
        none to displace, stop accepting for `ACCEPT_PAUSE` (the listener would wake at once)."""
        now = time.monotonic()
        with self._lock:
            self._fd_failures += 1
            evicted = self._evict(lingering=True)
            if evicted is None:
                self._paused_until = now + ACCEPT_PAUSE
                self._set_accepting(False)
            log_now = now >= self._fd_logged_at + FD_LOG_PERIOD
            if log_now:
                failures, self._fd_failures, self._fd_logged_at = self._fd_failures, 0, now
        if evicted is not None:
            self._close(evicted)
        if log_now:
            self.log.warning(
                "accept() failed %s times in %ss: %s (open-file limit %s, %s connections); "
                "connections are displaced, or accepting pauses %ss, until descriptors free up",
                failures,
                FD_LOG_PERIOD,
                error.strerror,
                resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                len(self._conns),
                ACCEPT_PAUSE,
            )

    def _evict(self, lingering: bool = False) -> Conn | None:
        """Called with the lock held at the cap: the connection to close for a new one, taken up
        (busy), or None when there is none to displace. A lingering one only if `lingering`."""
        now = time.monotonic()
        oldest = next(iter(self._idle.values()), None)
        if not lingering and oldest is not None and oldest.idle_since + IDLE_GRACE <= now:
            victim: Conn | None = oldest  # no progress at all, and the longest so: no need to look further
        else:
            victim = least_progress(self._conns.values(), now, lingering)
        if victim is not None:
            victim.busy = True
            self._idle.pop(victim.fd, None)
        return victim

    def _over_budget(self) -> list[Conn]:
        """Called with the lock held, past the memory budget: the connections to close, the
        least progress first, until the rest fit in it; each taken up (busy)."""
        now = time.monotonic()
        victims = to_fit(self._conns.values(), self._held, self.memory_budget, now)
        for conn in victims:
            conn.busy = True
            self._idle.pop(conn.fd, None)
        self._budget_displaced += len(victims)
        if victims and now >= self._budget_logged_at + FD_LOG_PERIOD:
            self.log.warning(
                "Over the memory budget (%s bytes held, of %s): %s connections displaced in %ss, "
                "those making the least progress",
                self._held,
                self.memory_budget,
                self._budget_displaced,
                FD_LOG_PERIOD,
            )
            self._budget_logged_at, self._budget_displaced = now, 0
        return victims

    def _account(self, conn: Conn) -> None:
        """Count what `conn` holds now against the budget. Called with the lock held."""
        held = conn.holding()
        self._held += held - conn.held
        conn.held = held

    def _rearm(self, conn: Conn, events: int) -> None:
        with self._lock:
            conn.busy = False
            self._account(conn)
            victims = self._over_budget() if self._held > self.memory_budget else ()
        if conn not in victims:
            # ValueError: the epoll is closed, because the graceful stop ran out of time.
            with contextlib.suppress(ValueError, OSError):
                self._epoll.modify(conn.fd, events)
        for victim in victims:
            self._close(victim)

    def _rearm_idle(self, conn: Conn) -> None:
        deadline = time.monotonic() + self.cfg.keepalive
        with self._lock:
            if not self.alive:
                deadline = min(deadline, time.monotonic() + 2.0)
            conn.deadline = deadline
            conn.idle_since = time.monotonic()
            self._idle[conn.fd] = conn
        self._rearm(conn, READ)

    def _rest_idle(self, conn: Conn) -> None:
        """Back to the idle connections, its deadline and place unchanged."""
        with self._lock:
            self._idle[conn.fd] = conn
        self._rearm(conn, READ)

    def _expire(self) -> None:
        """Run by the main thread: act on every connection past its deadline, and accept again
        after a pause for descriptors."""
        now = time.monotonic()
        expired, due = [], []
        with self._lock:
            if self._paused_until and now >= self._paused_until and self.alive:
                self._set_accepting(True)
            for conn in self._conns.values():
                if not conn.busy and conn.deadline <= now:
                    if conn.parked is not None and conn.out is None and not conn.woken:
                        due.append(conn)  # a waiting answer's deadline: ask it again
                        continue
                    conn.busy = True
                    self._idle.pop(conn.fd, None)
                    expired.append(conn)
        for conn in due:
            self._wake(conn)
        for conn in expired:
            try:
                if conn.reading_request:
                    # Too slow with its request: 408, then close as after any answer.
                    self.log.warning(
                        "Answered 408 to a client that did not send its whole request within %ss",
                        self.read_timeout,
                    )
                    with contextlib.suppress(OSError):
                        conn.sock.send(refusals.encode(refusals.TIMED_OUT))
                    self._close_gracefully(conn)
                else:  # idle, lingering, not taking its answer (a stream's included)
                    self._close(conn)
            except Exception:
                self.log.exception("Error closing a connection")

    def _close(self, conn: Conn) -> None:
        # Forget the fd before closing it: once closed, its number can be reused by the next
        # accept. Closing twice is harmless; it never forgets another connection's fd.
        with self._lock:
            if self._conns.get(conn.fd) is conn:
                del self._conns[conn.fd]
                self._idle.pop(conn.fd, None)
                self._held -= conn.held
                conn.held = 0
                if conn.lingering:
                    self._lingering -= 1
                with contextlib.suppress(OSError, ValueError):
                    self._epoll.unregister(conn.fd)
                if self.alive:  # the graceful stop turns accepting off under this lock
                    self._set_accepting(True)
        with contextlib.suppress(OSError):
            conn.sock.close()
        body, conn.body = conn.body, None
        if body is not None:
            self._close_body(body)

    def _close_body(self, body: Any) -> None:
        """Close the rest of an answer (the app's iterable, or its file)."""
        try:
            body.close()
        except Exception:
            self.log.exception("Error closing an answer's body")

    def _close_gracefully(self, conn: Conn) -> None:
        # RFC 9112 section 9.6: send FIN, then read and discard what the client still sends
        # until it closes, so that unread request bytes cannot make the kernel reset the
        # connection and cut off the answer. The lingering happens on the poller.
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        with self._lock:
            conn.lingering = True  # no longer counted against the cap
            self._lingering += 1
        conn.discard()
        conn.deadline = time.monotonic() + LINGER_SECONDS
        self._rearm(conn, READ)

    def _drain(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(LINGER_BYTES)
        except BlockingIOError:  # woken with nothing to read: keep lingering
            self._rearm(conn, READ)
            return
        except OSError:
            data = b""
        conn.lingered += len(data)
        if data and conn.lingered < LINGER_BYTES:
            self._rearm(conn, READ)
        else:
            self._close(conn)
