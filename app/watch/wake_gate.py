"""How many woken watchers may read the store on a request thread at once (issue 48: parked
watchers never take every thread).

A watch woken by a change (or by the listener's failure, or its own deadline) reads the feed on
a request thread. Under the packaged worker (app/server/worker/parking.py), a watch that finds no
free turn here for a store call gives its thread back at once and waits parked, holding no
thread. A turn's end wakes every watch waiting: most now share the read the turn made (or its
failure, app/watch/shared_reads.py) and need no turn; one that still does waits again. Handing
the turn on one watch at a time instead made a chain of wake-ups, each a worker's turn, behind
one another (bench/README.md). The worker's other threads stay free for requests, `/healthz`
among them, however slow the store is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class WakeGate:
    """At most `size` watches' store calls at once (None: no bound, for servers that do not park)."""

    def __init__(self, size: int | None = None) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._taken = 0
        #: The watches waiting for a turn: each by the wake-up its server handed it.
        self._waiting: dict[int, Callable[[], None]] = {}

    def resize(self, size: int | None) -> None:
        """Set the bound: the serving worker's request threads but one, at least one."""
        with self._lock:
            self.size = None if size is None else max(1, size)

    def enter(self, wake: Callable[[], None] | None) -> bool:
        """Take a turn (True), or False: then call `defer` with the watch's wake-up."""
        with self._lock:
            if self.size is not None and self._taken >= self.size:
                return False
            self._taken += 1
            if wake is not None:
                self._waiting.pop(id(wake), None)  # woken by its deadline meanwhile
            return True

    def leave(self) -> None:
        """End a turn; every watch waiting is woken to look again."""
        with self._lock:
            self._taken -= 1
            waiting, self._waiting = self._waiting, {}
        for wake in waiting.values():
            wake()

    def defer(self, wake: Callable[[], None]) -> None:
        """Wake `wake` at the end of a turn (at once if none is taken now)."""
        with self._lock:
            free = self.size is None or self._taken < self.size
            if not free:
                self._waiting[id(wake)] = wake
        if free:
            wake()

    def forget(self, wake: Callable[[], None]) -> None:
        """The watch ended while it waited."""
        with self._lock:
            self._waiting.pop(id(wake), None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)
