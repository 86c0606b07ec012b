"""How many woken watchers may take a request thread at once (issue 48: parked watchers never take
every thread).

A watch woken by a change (or by the listener's failure, or its own deadline) reads the feed on
a request thread. Under the packaged worker (app/server/worker/parking.py), a watch that finds no
free turn here gives its thread back at once and waits its turn parked, holding no thread: each
watch that ends its turn hands one to the watch that has waited longest. The worker's other
threads stay free for requests, `/healthz` among them, however slow the store is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class WakeGate:
    """At most `size` watches' turns at once (None: no bound, for servers that do not park)."""

    def __init__(self, size: int | None = None) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._taken = 0
        #: The watches waiting for a turn, oldest first: each by the wake-up its server handed it.
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
        """End a turn; the watch waiting longest is woken to take it."""
        with self._lock:
            self._taken -= 1
            wake = self._next_waiting()
        if wake is not None:
            wake()

    def defer(self, wake: Callable[[], None]) -> None:
        """Wake `wake` when a turn is free (at once if one is now)."""
        with self._lock:
            self._waiting[id(wake)] = wake
            wake_now = self._next_waiting()
        if wake_now is not None:
            wake_now()

    def forget(self, wake: Callable[[], None]) -> None:
        """The watch ended while it waited."""
        with self._lock:
            self._waiting.pop(id(wake), None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _next_waiting(self) -> Callable[[], None] | None:
        if not self._waiting or (self.size is not None and self._taken >= self.size):
            return None
        return self._waiting.pop(next(iter(self._waiting)))
