"""The worker's loop around its connections: the registry on the epoll, admission, the memory
budget and displacement.

**Registry**: each connection is on the epoll with `EPOLLONESHOT`; a request thread takes it for
one turn (`take`) and it hands itself back (`rearm`). Deadlines: an idle connection, the
keep-alive time; a request's head, `read_timeout` from its first byte, its body `read_timeout`
from the head (plus a second per 64 KiB); past either, 408 and close. An answer must be taken in
the same time (plus a second per 64 KiB of it), or the connection closes.
**Admission**: at most `worker_connections` (lowered at start to what the open-file limit allows,
said in one line); a lingering close does not count. Past the cap, the client just accepted
displaces the connection making the least progress, never itself, so N newcomers displace N at
most. Out of descriptors (EMFILE, ENFILE), one connection is displaced the same way, or with none,
accepting pauses `ACCEPT_PAUSE`. Waiting answers (parking.py) are never displaced, so they hold a
share of the cap only (`watch_limit`). After the graceful stop stops accepting, none is accepted.
**Budget** (GUNICORN_MEMORY_BUDGET): request bytes, unsent answer bytes and a waiting answer's
pieces (`holding`), counted as each connection is handed back; past it, connections
holding bytes are displaced until it holds.
**Displacement** order, least progress first: a lingering close (only its client's FIN is
awaited), then an idle one (the longest idle first) or the one whose request arrives, or answer is
taken, at the fewest bytes a second. One just connected or answered is spared `IDLE_GRACE`; one
being served, or waiting for its app with nothing unsent, never goes. One line per `LOG_PERIOD`.
"""

from __future__ import annotations

import contextlib
import errno
import resource
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from app.server.worker.connection import READ

if TYPE_CHECKING:
    from app.server.worker.connection import Conn


#: How long a connection that has just connected, or been answered, is spared.
IDLE_GRACE = 1.0


def progress(conn: Conn, now: float) -> tuple[float, float] | None:
    """How fast `conn` is going (bytes a second, then since when: the least goes first); None
    when it is not to be displaced."""
    if conn.standing.busy:
        return None
    if conn.standing.lingering:
        return (-1.0, conn.standing.deadline)
    outgoing = conn.outgoing
    if outgoing.out is not None or outgoing.body is not None:  # a reader: the bytes it has taken
        return (outgoing.sent / max(now - outgoing.started, 0.001), outgoing.started)
    if conn.standing.parked is not None:
        return None  # a watcher waiting for its app
    if conn.reading_request:
        incoming = conn.incoming
        return (incoming.received / max(now - incoming.started, 0.001), incoming.started)
    if conn.standing.idle_since + IDLE_GRACE > now:  # just connected, or just answered: last of all
        return (float("inf"), conn.standing.idle_since)
    return (0.0, conn.standing.idle_since)


def least_progress(conns: Iterable[Conn], now: float, lingering: bool, spare: Conn | None) -> Conn | None:
    """The connection to displace first; a lingering one only if `lingering`; never `spare`."""
    victim, least = None, None
    for conn in conns:
        if (conn.standing.lingering and not lingering) or conn is spare:
            continue
        going = progress(conn, now)
        if going is not None and (least is None or going < least):
            victim, least = conn, going
    return victim


def holding(conn: Conn) -> int:
    """The bytes held for `conn`: its request bytes, unsent answer and a waiting answer's pieces."""
    parked, out = conn.standing.parked, conn.outgoing.out
    held = conn.incoming.held() + (parked.held() if parked is not None else 0)
    return held + (len(out.obj) if out is not None else 0)  # type: ignore[arg-type]  # the whole buffer stays


#: The default memory budget of a worker (GUNICORN_MEMORY_BUDGET is in MiB).
MEMORY_BUDGET = 64 * 1024 * 1024
#: One line is logged per period at most, for descriptors (admission) and for the budget each.
LOG_PERIOD = 5.0


class Budget:
    """The bytes held, as last counted. Called with the registry's lock held."""

    def __init__(self, limit: int, log: Any) -> None:
        self.limit = limit
        self.held = 0
        self._log = log
        self._logged_at, self._displaced = 0.0, 0

    def account(self, conn: Conn, closed: bool = False) -> None:
        """Count what `conn` holds now (nothing once `closed`)."""
        self.held += conn.standing.recount(0 if closed else holding(conn))

    def over(self, conns: Iterable[Conn]) -> list[Conn]:
        """The connections to close, the least progress first, until the rest fit; none while
        the bytes held fit."""
        if self.held <= self.limit:
            return []
        now = time.monotonic()
        ranked = sorted(
            (going, conn.fd, conn) for conn in conns if conn.standing.held and (going := progress(conn, now))
        )
        victims, held = [], self.held
        for _, _, conn in ranked:
            if held <= self.limit:
                break
            victims.append(conn)
            held -= conn.standing.held
        self._displaced += len(victims)
        if victims and now >= self._logged_at + LOG_PERIOD:
            self._log.warning(
                "Over the memory budget (%s bytes held, of %s): %s connections displaced in %ss, "
                "those making the least progress",
                self.held,
                self.limit,
                self._displaced,
                LOG_PERIOD,
            )
            self._logged_at, self._displaced = now, 0
        return victims


#: How long a stopping worker keeps an idle connection for a request already on its way.
STOP_LINGER = 2.0


class Registry:
    """The worker's connections and its epoll. What it counts is read and written under `lock`."""

    def __init__(
        self, alive: Callable[[], bool], listeners: list[socket.socket], keepalive: float, budget: Budget
    ) -> None:
        self._alive = alive
        self._keepalive = keepalive
        self.budget = budget
        self.epoll = select.epoll()
        self.lock = threading.Lock()
        self.conns: dict[int, Conn] = {}
        # Idle connections, the longest idle first (a dict keeps insertion order).
        self._idle: dict[int, Conn] = {}
        self.listeners = {listener.fileno(): listener for listener in listeners}
        self.accepting = False
        self.paused_until = 0.0  # out of descriptors (Admission): no accepting before this
        # Lingering closes, the first to end first: each lingers the same time from its start, so
        # insertion order is deadline order, the order `least_progress` ranks them in.
        self._lingering: dict[int, Conn] = {}
        self.watches = 0  # waiting answers (parking.py), never displaced: `watch_limit` at most
        self.watch_limit = 0

    @property
    def lingering(self) -> int:
        """How many connections linger (not counted against the cap)."""
        return len(self._lingering)

    def set_accepting(self, accepting: bool) -> None:
        """Register the listeners on the epoll, or not. Called with the lock held."""
        if accepting and self.paused_until:
            if time.monotonic() < self.paused_until:
                return  # out of descriptors: `expired` resumes
            self.paused_until = 0.0
        if accepting == self.accepting:
            return
        self.accepting = accepting
        for fd in self.listeners:
            if accepting:
                self.epoll.register(fd, READ)
            else:
                self.epoll.unregister(fd)

    def add(self, conn: Conn) -> None:
        with self.lock:
            conn.standing.rests_since(time.monotonic())
            self.conns[conn.fd] = conn
            self._idle[conn.fd] = conn
        self.epoll.register(conn.fd, READ)

    def take(self, fd: int) -> Conn | None:
        """The connection whose turn has come, taken up (busy); None when another thread has it
        or it is gone."""
        with self.lock:
            conn = self.conns.get(fd)
            if conn is None or not conn.standing.take():
                return None
            self._idle.pop(fd, None)
        return conn

    def evict(self, lingering: bool = False, spare: Conn | None = None) -> Conn | None:
        """Called with the lock held at the cap: the connection to close for a new one, taken up
        (busy), or None when there is none to displace. A lingering one only if `lingering`; never
        `spare` (the connection just accepted)."""
        now = time.monotonic()
        # The lingering ones rank first, the oldest first (none is `spare`): taken without
        # scanning every connection (at the descriptors' room, each accept displaces one).
        victim = (
            next((c for c in self._lingering.values() if not c.standing.busy), None) if lingering else None
        )
        if victim is None:
            oldest = next(iter(self._idle.values()), None)
            if oldest is not spare and oldest is not None and oldest.standing.idle_since + IDLE_GRACE <= now:
                victim = oldest  # no progress at all, and the longest so: no need to look further
            else:
                victim = least_progress(self.conns.values(), now, False, spare)
        if victim is not None:
            victim.standing.take()
            self._idle.pop(victim.fd, None)
        return victim

    def rearm(self, conn: Conn, events: int) -> None:
        """Hand the connection back, to be woken for `events`."""
        with self.lock:
            conn.standing.hand_back()
            self.budget.account(conn)
            victims = self.budget.over(self.conns.values())
            for victim in victims:
                victim.standing.take()
                self._idle.pop(victim.fd, None)
        if conn not in victims:
            # ValueError: the epoll is closed, because the graceful stop ran out of time.
            with contextlib.suppress(ValueError, OSError):
                self.epoll.modify(conn.fd, events)
        for victim in victims:
            victim.close()

    def rearm_idle(self, conn: Conn) -> None:
        """Hand the connection back between requests, for the keep-alive time."""
        deadline = time.monotonic() + self._keepalive
        with self.lock:
            if not self._alive():
                deadline = min(deadline, time.monotonic() + STOP_LINGER)
            conn.standing.due_by(deadline)
            conn.standing.rests_since(time.monotonic())
            self._idle[conn.fd] = conn
        self.rearm(conn, READ)

    def rest_idle(self, conn: Conn) -> None:
        """Back to the idle connections, its deadline and place unchanged."""
        with self.lock:
            self._idle[conn.fd] = conn
        self.rearm(conn, READ)

    def modify(self, conn: Conn, events: int) -> None:
        """Arm the connection for `events` (a parked one's, parking.py)."""
        with contextlib.suppress(OSError, ValueError):  # closed meanwhile
            self.epoll.modify(conn.fd, events)

    def admit_watch(self) -> bool:
        """Take a place for an answer that waits; False when the watches' share is full."""
        with self.lock:
            if self.watches >= self.watch_limit:
                return False
            self.watches += 1
            return True

    def unpark(self, conn: Conn) -> Any:
        """The connection's waiting answer, taken off it (its place given back); None if none."""
        with self.lock:
            parked = conn.standing.park(None)
            if parked is not None:
                self.watches -= 1
        return parked

    def linger(self, conn: Conn) -> None:
        """The connection only lingers now: no longer counted against the cap."""
        with self.lock:
            conn.standing.start_lingering()
            self._lingering[conn.fd] = conn

    def expired(self) -> tuple[list[Conn], list[Conn]]:
        """Run by the main thread: the parked connections whose deadline has come (to ask again),
        and every other one past its deadline, taken up (to time out). Accepting resumes after a
        pause for descriptors."""
        now = time.monotonic()
        expired, due = [], []
        with self.lock:
            if self.paused_until and now >= self.paused_until and self._alive():
                self.set_accepting(True)
            for conn in self.conns.values():
                standing = conn.standing
                if not standing.busy and standing.deadline <= now:
                    if standing.parked is not None and conn.outgoing.out is None and not standing.woken:
                        due.append(conn)  # a waiting answer's deadline: ask it again
                        continue
                    conn.standing.take()
                    self._idle.pop(conn.fd, None)
                    expired.append(conn)
        return due, expired

    def forget(self, conn: Conn) -> None:
        """The connection closes (connection.py): its place is free. Forgetting twice is harmless;
        it never forgets another connection's fd."""
        with self.lock:
            if self.conns.get(conn.fd) is conn:
                del self.conns[conn.fd]
                self._idle.pop(conn.fd, None)
                self.budget.account(conn, closed=True)
                self._lingering.pop(conn.fd, None)
                with contextlib.suppress(OSError, ValueError):
                    self.epoll.unregister(conn.fd)
                if self._alive():  # the graceful stop turns accepting off under this lock
                    self.set_accepting(True)


#: The most connections one wake-up of a listener accepts (each displacing another at the cap).
ACCEPT_BATCH = 64
#: Descriptors kept for the app beside its connections (the store's and webhooks' sockets, files).
FD_RESERVE = 128
#: Out of descriptors with nothing to displace: accepting pauses this long.
ACCEPT_PAUSE = 0.5
#: The unsent bytes the kernel takes a TCP socket (TCP_NOTSENT_LOWAT; Linux's number where
#: Python's `socket` does not name it).
NOTSENT_LOWAT = 128 * 1024
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


#: The share of the connection cap that answers waiting for the feed (watches) may hold at most;
#: the rest, and at least one more than the request threads, is kept for every other request.
WATCH_SHARE = 0.9


def watch_limit(cap: int, threads: int) -> int:
    """The watches a worker holds at once: a parked watch is never displaced, so they may hold
    `WATCH_SHARE` of the cap, leaving at least `threads + 1` connections that a new client can
    displace (a request being served, at most one per thread, is not displaced either)."""
    return max(min(int(cap * WATCH_SHARE), cap - threads - 1), 0)


def connection_cap(asked: int, log: Any) -> tuple[int, int]:
    """The cap (`worker_connections`, lowered to fit the open-file limit) and the most
    connections, lingering ones included, the descriptors allow."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = 2 * asked if soft == resource.RLIM_INFINITY else max(soft - FD_RESERVE, 1)
    if asked > room:
        log.warning(
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


class Admission:
    """Takes new connections from the listeners into the registry; see the module docstring."""

    def __init__(
        self,
        registry: Registry,
        cap: tuple[int, int],
        connect: Callable[[socket.socket, Any, Any], Conn],
        first_wait: float,
        log: Any,
    ) -> None:
        self._registry = registry
        self.max_connections, self._fd_room = cap
        self._connect = connect  # a new connection's protocol (connection.py)
        self._first_wait = first_wait  # how long a new connection has for its first request
        self._log = log
        # Read once: a listener closed at exit has no name, and a connection accepted then is
        # still served.
        self._socknames = {fd: listener.getsockname() for fd, listener in registry.listeners.items()}
        # Held through an accept batch: once accepting has stopped and this is free, no
        # connection is accepted that the graceful stop does not see.
        self._accept_lock = threading.Lock()
        self._fd_failures = 0
        self._fd_logged_at = 0.0

    def start(self) -> None:
        with self._registry.lock:
            self._registry.set_accepting(True)

    def stop(self) -> None:
        """No connection is accepted after this returns (a batch under way has ended)."""
        with self._registry.lock:
            self._registry.set_accepting(False)
        with self._accept_lock:
            pass

    def accept(self, listener: socket.socket) -> None:
        """A listener's turn: accept what waits, then re-arm it."""
        registry = self._registry
        try:
            with self._accept_lock:
                self._accept_all(listener)
        finally:
            with registry.lock:
                if registry.accepting:
                    registry.epoll.modify(listener.fileno(), READ)

    def _accept_all(self, listener: socket.socket) -> None:
        registry = self._registry
        for _ in range(ACCEPT_BATCH):
            with registry.lock:
                if not registry.accepting:  # stopping, or paused: the next worker takes the client
                    return
            try:
                client_sock, client_addr = listener.accept()
            except OSError as e:
                if e.errno in _OUT_OF_DESCRIPTORS:
                    self._out_of_descriptors(e)
                elif e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                    self._log.exception("accept() failed")
                return
            client_sock.setblocking(False)
            if client_sock.family in (socket.AF_INET, socket.AF_INET6):
                # The kernel takes at most this much unsent data a socket, and EPOLLOUT waits till
                # it drains: a slow reader no longer parks its whole answer in TCP memory, which
                # every socket on the host would feel. The bytes in flight are not limited.
                with contextlib.suppress(OSError):
                    client_sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, NOTSENT_LOWAT)
            conn = self._connect(client_sock, client_addr, self._socknames[listener.fileno()])
            conn.standing.due_by(time.monotonic() + self._first_wait)
            registry.add(conn)
            if not self._make_room(conn):
                return

    def _make_room(self, accepted: Conn) -> bool:
        """Past the cap with the connection just accepted, displace one other (never it): so N
        newcomers displace N connections at most. With none to displace, the worker holds one
        more than its cap until a connection closes, and accepting stops (False) till then."""
        registry = self._registry
        with registry.lock:
            counted = len(registry.conns) - registry.lingering
            if counted <= self.max_connections and len(registry.conns) <= self._fd_room:
                return True
            evicted = registry.evict(lingering=counted <= self.max_connections, spare=accepted)
            if evicted is None:
                registry.set_accepting(False)
                return False
        evicted.close()
        return True

    def _out_of_descriptors(self, error: OSError) -> None:
        """accept() found no descriptor: displace a connection for the next client, or with
        none to displace, stop accepting for `ACCEPT_PAUSE` (the listener would wake at once)."""
        now = time.monotonic()
        registry = self._registry
        with registry.lock:
            self._fd_failures += 1
            evicted = registry.evict(lingering=True)
            if evicted is None:
                registry.paused_until = now + ACCEPT_PAUSE  # the registry's `expired` resumes
                registry.set_accepting(False)
            log_now = now >= self._fd_logged_at + LOG_PERIOD
            if log_now:
                failures, self._fd_failures, self._fd_logged_at = self._fd_failures, 0, now
        if evicted is not None:
            evicted.close()
        if log_now:
            self._log.warning(
                "accept() failed %s times in %ss: %s (open-file limit %s, %s connections); "
                "connections are displaced, or accepting pauses %ss, until descriptors free up",
                failures,
                LOG_PERIOD,
                error.strerror,
                resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                len(registry.conns),
                ACCEPT_PAUSE,
            )
