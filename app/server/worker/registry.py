"""The worker's connections on its epoll (`Registry`): displacement, deadlines, closing.

Every connection is registered with `EPOLLONESHOT`: a request thread takes it for one turn
(`take`), and the connection hands itself back (`rearm`) when its turn ends (connection.py).

- **the memory budget** (budget.py): the bytes the worker holds for its clients, counted at
  each re-arm;
- at the connection cap (admission.py), a new client displaces the connection making the least
  progress, and past the budget, connections holding bytes are displaced in the same order
  until it holds again (displacement.py: a lingering close first, then an idle one or the
  slowest in bytes a second);
- an idle connection (between requests) is closed after the keep-alive time;
- a request's head must arrive within `read_timeout` of its first byte, and its body within
  `read_timeout` of the head (plus a second per 64 KiB): past either, 408 and close;
- an answer must be taken within the same time (plus a second per 64 KiB of it), or the
  connection is closed.

The listeners are registered on the same epoll while the worker accepts (`set_accepting`).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.server.worker.budget import Budget
from app.server.worker.displacement import IDLE_GRACE, least_progress

if TYPE_CHECKING:
    from app.server.worker.connection import Conn

#: EPOLLRDHUP: a client that closed after part of a request is closed in the same turn.
READ = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLONESHOT
WRITE = select.EPOLLOUT | select.EPOLLONESHOT
#: A parked answer's connection: woken by its client leaving (or, armed WRITE, by its `wake`).
PARKED = select.EPOLLRDHUP | select.EPOLLONESHOT
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
        self.paused_until = 0.0  # out of descriptors (admission.py): no accepting before this
        self.lingering = 0
        # Answers that wait (parking.py) hold a connection each, and are never displaced: they may
        # hold a share of the cap only (admission.py's `watch_limit`), so that plain requests always
        # find a connection to displace.
        self.watches = 0
        self.watch_limit = 0

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
            conn.idle_since = time.monotonic()
            self.conns[conn.fd] = conn
            self._idle[conn.fd] = conn
        self.epoll.register(conn.fd, READ)

    def take(self, fd: int) -> Conn | None:
        """The connection whose turn has come, taken up (busy); None when another thread has it
        or it is gone."""
        with self.lock:
            conn = self.conns.get(fd)
            if conn is None or conn.busy:
                return None
            conn.busy = True
            self._idle.pop(fd, None)
        return conn

    def evict(self, lingering: bool = False, spare: Conn | None = None) -> Conn | None:
        """Called with the lock held at the cap: the connection to close for a new one, taken up
        (busy), or None when there is none to displace. A lingering one only if `lingering`; never
        `spare` (the connection just accepted)."""
        now = time.monotonic()
        oldest = next(iter(self._idle.values()), None)
        if oldest is spare:  # the client just accepted is the one that needs the room
            oldest = None
        if not lingering and oldest is not None and oldest.idle_since + IDLE_GRACE <= now:
            victim: Conn | None = oldest  # no progress at all, and the longest so: no need to look further
        else:
            victim = least_progress(self.conns.values(), now, lingering, spare)
        if victim is not None:
            victim.busy = True
            self._idle.pop(victim.fd, None)
        return victim

    def rearm(self, conn: Conn, events: int) -> None:
        """Hand the connection back, to be woken for `events`."""
        with self.lock:
            conn.busy = False
            self.budget.account(conn)
            victims = self.budget.over(self.conns.values())
            for victim in victims:
                victim.busy = True
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
            conn.deadline = deadline
            conn.idle_since = time.monotonic()
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
            parked, conn.parked = conn.parked, None
            if parked is not None:
                self.watches -= 1
        return parked

    def linger(self, conn: Conn) -> None:
        """The connection only lingers now: no longer counted against the cap."""
        with self.lock:
            conn.lingering = True
            self.lingering += 1

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
                if not conn.busy and conn.deadline <= now:
                    if conn.parked is not None and conn.outgoing.out is None and not conn.woken:
                        due.append(conn)  # a waiting answer's deadline: ask it again
                        continue
                    conn.busy = True
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
                self.budget.release(conn)
                if conn.lingering:
                    self.lingering -= 1
                with contextlib.suppress(OSError, ValueError):
                    self.epoll.unregister(conn.fd)
                if self._alive():  # the graceful stop turns accepting off under this lock
                    self.set_accepting(True)
