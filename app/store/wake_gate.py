"""How many woken watchers may read the store on a request thread at once (issue 48: parked
watchers never take every thread).

A watch woken by a change (or by the listener's failure, or its own deadline) reads the feed on
a request thread. Under the packaged worker (app/server/worker/parking.py), a watch that finds no
free turn here gives its thread back at once and waits its turn parked, holding no thread: each
watch that ends its turn hands one to the watch that has waited longest. A turn so handed is kept
for that watch until its next step, which takes it or, not needing it (another watcher's read
was shared), hands it on (`settle`): no waiting watch is left behind a free turn. The worker's
other threads stay free for requests, `/healthz` among them, however slow the store is.
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
        #: The watches woken for a turn kept for them (by their wake-up's id).
        self._granted: set[int] = set()

    def resize(self, size: int | None) -> None:
        """Set the bound: the serving worker's request threads but one, at least one."""
        with self._lock:
            self.size = None if size is None else max(1, size)

    def enter(self, wake: Callable[[], None] | None) -> bool:
        """Take a turn (True), or False: then call `defer` with the watch's wake-up."""
        with self._lock:
            if wake is not None and id(wake) in self._granted:
                self._granted.discard(id(wake))
            elif self.size is not None and self._taken + len(self._granted) >= self.size:
                return False
            elif wake is not None:
                self._waiting.pop(id(wake), None)  # woken by its deadline meanwhile
            self._taken += 1
            return True

    def settle(self, wake: Callable[[], None] | None) -> None:
        """After a watch's step: a turn kept for it that it did not take goes to the next."""
        if wake is None or id(wake) not in self._granted:  # the common case, without the lock
            return
        with self._lock:
            if id(wake) not in self._granted:
                return
            self._granted.discard(id(wake))
            following = self._next_waiting()
        if following is not None:
            following()

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
        self.settle(wake)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _next_waiting(self) -> Callable[[], None] | None:
        """The watch waiting longest, its turn kept for it, when one is free (under the lock)."""
        if not self._waiting or (self.size is not None and self._taken + len(self._granted) >= self.size):
            return None
        key = next(iter(self._waiting))
        self._granted.add(key)
        return self._waiting.pop(key)
