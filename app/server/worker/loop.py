"""The worker's loop: its request threads (`run_thread`), the registry of its connections on the
epoll (a thread takes one for a turn, `EPOLLONESHOT`, and hands it back), the memory budget,
admission under the connection cap, and displacement (`progress`): CONTRIBUTING.md tells the rules.
"""

from __future__ import annotations

import contextlib
import errno
import math
import resource
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from app.server.worker.connection import PARKED, READ, WRITE
from app.server.worker.tally import LOG_PERIOD, Tally

if TYPE_CHECKING:
    from app.server.worker.connection import Conn

#: How long a connection that has just connected, or been answered, is displaced last.
IDLE_GRACE = 1.0
#: How long a stopping worker keeps an idle connection for a request already on its way.
STOP_LINGER = 2.0
#: The most connections one wake-up of a listener accepts (each displacing another at the cap).
ACCEPT_BATCH = 64
#: Descriptors kept for the app beside its connections (the store's and webhooks' sockets, files).
FD_RESERVE = 128
#: Out of descriptors with nothing to displace: accepting pauses this long.
ACCEPT_PAUSE = 0.5
#: The unsent bytes the kernel takes a TCP socket (Linux's number where Python's `socket` lacks it).
NOTSENT_LOWAT = 128 * 1024
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
#: The share of the cap that watches may hold: a parked watch is never displaced, so the rest (at
#: least one more than the request threads, not displaced either) is kept for every other request.
WATCH_SHARE = 0.9


def progress(conn: Conn, now: float) -> tuple[float, float] | None:
    """How fast `conn` goes (bytes a second, then since when): the least is displaced first. None
    when it is never displaced (being served, or waiting for its app with nothing unsent)."""
    standing, outgoing = conn.standing, conn.outgoing
    if standing.busy:
        return None
    if standing.lingering:  # only its client's FIN is awaited
        return (-1.0, standing.deadline)
    if outgoing.out is not None or outgoing.body is not None:  # a reader: the bytes it has taken
        return (outgoing.taken / max(now - outgoing.started, 0.001), outgoing.started)
    if standing.parked is not None:
        return None
    if conn.reading_request:
        incoming = conn.incoming
        return (incoming.received / max(now - incoming.started, 0.001), incoming.started)
    if standing.idle_since + IDLE_GRACE > now:  # just connected, or just answered: last of all
        return (float("inf"), standing.idle_since)
    return (0.0, standing.idle_since)


def unread(conn: Conn) -> bool:
    """Whether bytes from its client wait unread (a system call: not on an ordinary request's path)."""
    with contextlib.suppress(OSError):  # nothing to read, or reset
        return bool(conn.sock.recv(1, socket.MSG_PEEK))
    return False


def ranked(conns: Iterable[Conn], now: float) -> dict[Conn, tuple[float, float]]:
    """The connections that may be displaced, each with its `progress`."""
    return {conn: going for conn in conns if (going := progress(conn, now)) is not None}


class Budget:
    """The bytes held for the connections (request bytes, unsent answers, a long-poll's collected
    pieces), as counted when each is handed back. Used under the registry's lock."""

    def __init__(self, limit: int, log: Any) -> None:
        self.limit, self.held, self._log = limit, 0, log
        self._displaced = Tally()

    def account(self, conn: Conn, closed: bool = False) -> None:
        standing, held = conn.standing, 0
        if not closed:
            out = conn.outgoing.out  # a memoryview of the answer: its whole buffer stays
            held = conn.incoming.buffered() + (len(out.obj) if out is not None else 0)  # type: ignore[arg-type]
            if standing.parked is not None:  # a long-poll's collected page
                held += sum(map(len, standing.parked.answer.chunks))
        self.held += held - standing.budgeted
        standing.budgeted = held

    def over(self, conns: Iterable[Conn]) -> list[Conn]:
        """The connections to close, the least progress first, until the rest fit."""
        if self.held <= self.limit:
            return []
        now = time.monotonic()
        going = ranked((conn for conn in conns if conn.standing.budgeted), now)
        victims, held = [], self.held
        for conn in sorted(going, key=going.__getitem__):
            if held <= self.limit:
                break
            victims.append(conn)
            held -= conn.standing.budgeted
        if displaced := self._displaced.add(len(victims), now):
            self._log.warning(
                f"Over the memory budget ({self.held} bytes held, of {self.limit}): {displaced} "
                f"connections displaced in {LOG_PERIOD}s, those making the least progress"
            )
        return victims


class Listening:
    """The listeners, on the worker's epoll while it accepts (under the registry's lock)."""

    def __init__(self, epoll: select.epoll, listeners: list[socket.socket]) -> None:
        self._epoll = epoll
        self.sockets = {listener.fileno(): listener for listener in listeners}
        self.accepting = False
        self.paused_until = 0.0  # out of descriptors (Admission): no accepting before this

    def set_accepting(self, accepting: bool) -> None:
        if accepting and self.paused_until:
            if time.monotonic() < self.paused_until:
                return  # out of descriptors: the registry's `expired` resumes
            self.paused_until = 0.0
        if accepting != self.accepting:
            self.accepting = accepting
            for fd in self.sockets:
                if accepting:
                    self._epoll.register(fd, READ)
                else:
                    self._epoll.unregister(fd)


class Registry:
    """The worker's connections on its epoll. What it counts is read and written under `lock`."""

    def __init__(
        self, alive: Callable[[], bool], listeners: list[socket.socket], keepalive: float, budget: Budget
    ) -> None:
        self._alive, self._keepalive, self.budget = alive, keepalive, budget
        self.epoll = select.epoll()
        self.lock = threading.Lock()
        self.conns: dict[int, Conn] = {}
        # The idle ones, the longest idle first, and the lingering ones, the first to end first
        # (each lingers as long): a dict keeps insertion order, so neither is sorted nor scanned
        # (Admission.evict takes the first of each).
        self.idle: dict[int, Conn] = {}
        self.lingering: dict[int, Conn] = {}
        self.listening = Listening(self.epoll, listeners)
        self.watches = 0  # parked answers, never displaced: `watch_limit` at most
        self.watch_limit = 0  # set by Admission
        self.answers_until = math.inf  # set by the graceful stop (`owes_answers`)

    @property
    def counted(self) -> int:
        """The connections counted against the cap: a lingering close is not."""
        return len(self.conns) - len(self.lingering)

    def add(self, conn: Conn, deadline: float = 0.0) -> None:
        with self.lock:
            conn.standing.idle_since, conn.standing.deadline = time.monotonic(), deadline
            self.conns[conn.fd] = self.idle[conn.fd] = conn
        self.epoll.register(conn.fd, READ)

    def take(self, fd: int) -> Conn | None:
        """The connection whose turn has come, taken up (busy); None if another thread has it, or gone."""
        with self.lock:
            conn = self.conns.get(fd)
            return conn if conn is not None and self.claim(conn) else None

    def claim(self, conn: Conn) -> bool:
        """Under the lock: take the connection up (busy); False if another thread has it."""
        self.idle.pop(conn.fd, None)
        if conn.standing.busy:  # another thread has it
            return False
        conn.standing.busy = True
        return True

    def rearm(self, conn: Conn, events: int, idle: bool = False, anew: bool = False) -> None:
        """Hand the connection back, to be woken for `events`, held to the memory budget: past it,
        those making the least progress close (this one may be among them). `idle`: it rests
        among the idle connections, `anew`: for the keep-alive time from now (less once stopping)."""
        standing = conn.standing
        with standing.handing_back:  # its close waits for this arm (`forget`)
            with self.lock:
                if idle:
                    self.idle[conn.fd] = conn
                if anew:
                    standing.idle_since = now = time.monotonic()
                    keepalive = self._keepalive if self._alive() else min(self._keepalive, STOP_LINGER)
                    standing.deadline = now + keepalive
                if events == PARKED and standing.woken:  # woken while its thread had it (`wake`)
                    # Its step comes when the socket is writable: a client that takes nothing
                    # within the read timeout is closed, to reconnect from its last event.
                    events = WRITE
                    conn.allow(0)
                standing.busy = False
                self.budget.account(conn)
                victims = self.budget.over(self.conns.values())
                for victim in victims:
                    self.claim(victim)
                parked = standing.parked is not None
                if parked and conn not in victims:  # under the lock: a parked answer's `wake` arms it too
                    self._arm(conn, events)
            if not parked and conn not in victims:
                # Outside the lock: epoll_ctl lets go of the GIL, and a request thread that took it
                # meanwhile would wait on the lock, then on the GIL (futex calls on every request).
                # Another thread may close the connection now, but its number is reused only after.
                self._arm(conn, events)
        for victim in victims:
            victim.close()

    def _arm(self, conn: Conn, events: int) -> None:
        # OSError: closed meanwhile; ValueError: the epoll is, as the graceful stop ran out of time.
        with contextlib.suppress(ValueError, OSError):
            self.epoll.modify(conn.fd, events)

    def wake(self, conn: Conn) -> None:
        """From any thread: the connection's parked answer has more to give. Armed for its next
        step at once, or, while a thread has it, as that thread hands it back (`rearm`)."""
        with self.lock:
            standing = conn.standing
            if standing.woken:
                return
            standing.woken = True
            if not standing.busy and standing.parked is not None:
                conn.allow(0)  # as `rearm` arms one woken while its thread had it
                self._arm(conn, WRITE)

    def owes_answers(self, conn: Conn) -> bool:
        """Once the worker stops: whether the client has sent more requests already (read, or
        unread on its socket). They are answered in turn while the stop lingers, the last with
        `Connection: close`: dropped, a client could not tell that a reload failed them."""
        return time.monotonic() < self.answers_until and (conn.incoming.has_work or unread(conn))

    def park(self, conn: Conn, parked: Any) -> bool:
        """Park an answer on the connection; False when the watches' share of the cap is full."""
        with self.lock:
            if self.watches >= self.watch_limit:
                return False
            self.watches += 1
            conn.standing.parked = parked
        return True

    def unpark(self, conn: Conn) -> Any:
        """The connection's waiting answer, taken off it (its place given back); None if none."""
        with self.lock:
            parked, conn.standing.parked = conn.standing.parked, None
            if parked is not None:
                self.watches -= 1
        return parked

    def linger(self, conn: Conn) -> None:
        """Not counted against the cap from now."""
        with self.lock:
            conn.standing.lingering = True
            self.lingering[conn.fd] = conn

    def expired(self) -> tuple[list[Conn], list[Conn]]:
        """The parked answers whose deadline has come (to ask again), and every other connection
        past its deadline, taken up (to time out); accepting resumes after a pause for descriptors."""
        now = time.monotonic()
        due, expired = [], []
        with self.lock:
            if self.listening.paused_until and now >= self.listening.paused_until and self._alive():
                self.listening.set_accepting(True)
            for conn in self.conns.values():
                standing = conn.standing
                if standing.busy or standing.deadline > now:
                    continue
                if standing.parked is not None and conn.outgoing.out is None and not standing.woken:
                    due.append(conn)
                else:  # not busy (above): taken up
                    self.claim(conn)
                    expired.append(conn)
        return due, expired

    def forget(self, conn: Conn) -> None:
        """The connection closes: its place is free. Harmless twice; never another one's fd."""
        with self.lock:
            if self.conns.get(conn.fd) is conn:
                del self.conns[conn.fd]
                self.idle.pop(conn.fd, None)
                self.lingering.pop(conn.fd, None)
                self.budget.account(conn, closed=True)
                with contextlib.suppress(OSError, ValueError):
                    self.epoll.unregister(conn.fd)
                if self._alive():  # the graceful stop turns accepting off under this lock
                    self.listening.set_accepting(True)
        with conn.standing.handing_back:  # an arm in flight (`rearm`) lands before the socket closes
            pass


class Admission:
    """Takes new connections from the listeners into the registry, under the cap: past it, the one
    just accepted displaces another (never itself), so N newcomers displace N at most."""

    def __init__(self, registry: Registry, asked: int, threads: int, log: Any) -> None:
        self._registry, self._log = registry, log
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        room = 2 * asked if soft == resource.RLIM_INFINITY else max(soft - FD_RESERVE, 1)
        if asked > room:
            log.warning(
                f"--worker-connections {asked} is more than the open-file limit of {soft} allows: this "
                f"worker takes {room} connections ({FD_RESERVE} descriptors are kept for the app). To "
                "take more, raise the limit: `ulimit -n` in the shell that starts gunicorn, or "
                "LimitNOFILE= in its systemd unit."
            )
        # The cap (`worker_connections`, lowered to fit the open-file limit), and the most
        # connections, lingering ones included, the descriptors allow.
        self.max_connections, self._fd_room = min(asked, room), min(room, 2 * asked)
        cap = self.max_connections  # of which watches hold `WATCH_SHARE`, and leave `threads + 1`
        registry.watch_limit = max(min(int(cap * WATCH_SHARE), cap - threads - 1), 0)
        # Read once: a listener closed at exit has no name, and a connection accepted then is served.
        self._socknames = {fd: listener.getsockname() for fd, listener in registry.listening.sockets.items()}
        # Held through an accept batch: once accepting has stopped and this is free, no
        # connection is accepted that the graceful stop does not see.
        self._accept_lock = threading.Lock()
        self._fd_failures = Tally()

    def start(self, connect: Callable[[socket.socket, Any, Any], Conn], first_wait: float) -> None:
        """Accept from now on: `connect` makes a `Conn`, which has `first_wait` for its first request."""
        self._connect, self._first_wait = connect, first_wait
        with self._registry.lock:
            self._registry.listening.set_accepting(True)

    def stop(self) -> None:
        """No connection is accepted after this returns (a batch under way has ended)."""
        with self._registry.lock:
            self._registry.listening.set_accepting(False)
        with self._accept_lock:
            pass

    def accept(self, listener: socket.socket) -> None:
        registry = self._registry
        try:
            with self._accept_lock:
                self._accept_all(listener)
        finally:
            with registry.lock:
                if registry.listening.accepting:
                    registry.epoll.modify(listener.fileno(), READ)

    def _accept_all(self, listener: socket.socket) -> None:
        registry = self._registry
        for _ in range(ACCEPT_BATCH):
            with registry.lock:
                if not registry.listening.accepting:  # stopping, or paused: the next worker takes the client
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
                # EPOLLOUT waits till the kernel holds at most this much unsent: a slow reader does
                # not park its whole answer in TCP memory, which every socket on the host would feel.
                with contextlib.suppress(OSError):
                    client_sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, NOTSENT_LOWAT)
            conn = self._connect(client_sock, client_addr, self._socknames[listener.fileno()])
            registry.add(conn, time.monotonic() + self._first_wait)
            if not self._make_room(conn):
                return

    def evict(self, lingering: bool, spare: Conn | None = None) -> Conn | None:
        """Under the registry's lock, at the cap: the connection to close for a new one, taken up,
        or None. A lingering one only if `lingering`; never `spare` (the one just accepted)."""
        registry, now = self._registry, time.monotonic()
        # The oldest lingering close, else the longest idle past its grace, ranks first: found
        # without a scan (at the descriptors' room, each accept displaces one).
        free = (c for c in registry.lingering.values() if not c.standing.busy)
        victim = next(free, None) if lingering else None
        oldest = next(iter(registry.idle.values()), None)
        if victim is None and oldest is not None and oldest is not spare:
            victim = oldest if oldest.standing.idle_since + IDLE_GRACE <= now else None
        if victim is None:
            others = (c for c in registry.conns.values() if c is not spare and not c.standing.lingering)
            going = ranked(others, now)
            victim = min(going, key=going.__getitem__, default=None)
            if victim is not None and going[victim][0] == float("inf") and unread(victim):
                # All were just connected or answered: closed with its request unread, this one
                # would be reset, so the first that has sent nothing goes instead (peeks, at the cap).
                victim = next((c for c in sorted(going, key=going.__getitem__) if not unread(c)), victim)
        if victim is not None:
            registry.claim(victim)
        return victim

    def _make_room(self, accepted: Conn) -> bool:
        """Past the cap, displace one other connection than `accepted`. With none to displace,
        the worker holds one more than its cap, and accepting stops (False) till one closes."""
        registry = self._registry
        with registry.lock:
            counted = registry.counted
            if counted <= self.max_connections and len(registry.conns) <= self._fd_room:
                return True
            evicted = self.evict(lingering=counted <= self.max_connections, spare=accepted)
            if evicted is None:
                registry.listening.set_accepting(False)
                return False
        evicted.close()
        return True

    def _out_of_descriptors(self, error: OSError) -> None:
        """Displace a connection for the next client, or with none, stop accepting for
        `ACCEPT_PAUSE` (the listener would wake at once)."""
        now = time.monotonic()
        registry = self._registry
        with registry.lock:
            evicted = self.evict(lingering=True)
            if evicted is None:
                registry.listening.paused_until = now + ACCEPT_PAUSE  # the registry's `expired` resumes
                registry.listening.set_accepting(False)
            failures = self._fd_failures.add(1, now)
        if evicted is not None:
            evicted.close()
        if failures:
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            self._log.warning(
                f"accept() failed {failures} times in {LOG_PERIOD}s: {error.strerror} (open-file limit "
                f"{limit}, {len(registry.conns)} connections); connections are displaced, or accepting "
                f"pauses {ACCEPT_PAUSE}s, until descriptors free up"
            )


def run_thread(registry: Registry, admission: Admission, log: Any) -> None:
    """A request thread's loop: a turn on whichever connection or listener the epoll has ready."""
    poll, listeners, take = registry.epoll.poll, registry.listening.sockets, registry.take
    while True:
        try:
            events = poll(1.0, 1)
        except (ValueError, OSError):  # the epoll is closed (EBADF, its only error here): the worker exits
            return
        for fd, _ in events:
            listener = listeners.get(fd)
            try:
                if listener is not None:
                    admission.accept(listener)
                elif (conn := take(fd)) is not None:
                    conn.turn()
            except Exception:  # a request thread must outlive any one connection
                log.exception("Error serving a connection")
