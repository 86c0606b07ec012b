"""How many woken watches may read the store on a request thread at once, so that the watches
never take every thread: on a shared store, the worker's request threads but one
(app/server/gunicorn_conf.py: `_bound_watches`); on the memory store, or under another
server, no bound.

A watch woken by a change (or by the listener's failure, or its own deadline) reads the feed on
a request thread, in a read slot taken by `enter` and given back by `leave` (app/watch/wake_up.py:
`WakeUp.fetch`). Under the packaged worker, a watch that finds no slot free for a store call
gives its thread back at once and waits parked, holding no thread: its next `subscribe` files
its wake-up here (`defer`) instead of with the signal, and the worker parks it as it parks any watch
(app/server/worker/loop.py: `Registry.wake` hands it a thread again). A slot's end wakes every
watch deferred: most now share the read the slot made (or its failure, app/watch/shared_reads.py)
and need no slot; one that still does waits again. Handing the slot on one watch at a time
instead made a chain of wake-ups, each a worker's turn, behind one another (bench/README.md).
The worker's other threads stay free for requests, `/healthz` among them, however slow the store
is. A watch blocked in its own thread (another server) reads without a slot: it holds that
thread anyway.
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
        #: The watches deferred to a slot's end: each by the wake-up its server handed it.
        self._deferred: dict[int, Callable[[], None]] = {}

    def resize(self, size: int | None) -> None:
        """Set the bound: the serving worker's request threads but one, at least one."""
        with self._lock:
            self.size = None if size is None else max(1, size)

    def enter(self, wake: Callable[[], None] | None) -> bool:
        """Take a read slot (True), or False: then call `defer` with the watch's wake-up."""
        with self._lock:
            if self.size is not None and self._taken >= self.size:
                return False
            self._taken += 1
            if wake is not None:
                self._deferred.pop(id(wake), None)  # woken by its deadline meanwhile
            return True

    def leave(self) -> None:
        """Give a read slot back; every watch deferred is woken to look again."""
        with self._lock:
            self._taken -= 1
            deferred, self._deferred = self._deferred, {}
        for wake in deferred.values():
            wake()

    def defer(self, wake: Callable[[], None]) -> None:
        """Wake `wake` when a read slot is given back (at once if one is free now)."""
        with self._lock:
            free = self.size is None or self._taken < self.size
            if not free:
                self._deferred[id(wake)] = wake
        if free:
            wake()

    def forget(self, wake: Callable[[], None]) -> None:
        """The watch ended while it waited."""
        with self._lock:
            self._deferred.pop(id(wake), None)

    @property
    def deferred(self) -> int:
        """How many watches wait for a slot's end."""
        return len(self._deferred)
