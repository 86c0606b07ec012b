"""This process's watchers of the change feed: woken when it changes.

A write of this process notifies at once (`notify`), naming the change, which wakes the watchers
whose filter it may concern (wake_index.py). On a shared store, a listener thread hears
every other process's writes too (`store.feed_listener()`: blocking reads of the feed's streams).
It runs while someone watches, or for good where the process delivers webhooks (`listen`).

Watchers woken by one change mostly read the same page from the same position: `reads` makes
that read once per change and hands the others the same answer (shared_reads.py); `gate` bounds
how many woken watchers take a request thread at once (wake_gate.py). A listener that fails (the
store is away) wakes the watchers once, then at growing intervals: each wake-up would have them
read a store that is not answering.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from app.watch.filters import EventFilter
from app.watch.shared_reads import SharedReads
from app.watch.wake_gate import WakeGate
from app.watch.wake_index import Touched, WakeIndex, WokenTally

log = logging.getLogger(__name__)
#: Seconds a listener blocks in one call; it checks for watchers between calls.
LISTEN_SECONDS = 5.0
#: While the listener keeps failing, it wakes the watchers at intervals doubling up to this.
MAX_BACKOFF_SECONDS = 30.0


class WatchersFull(Exception):
    """A new watcher refused: the process has its most, or (`per_caller`) its caller has."""

    def __init__(self, *, per_caller: bool) -> None:
        super().__init__("per caller" if per_caller else "per process")
        self.per_caller = per_caller


class FeedListener(Protocol):
    def wait(self, timeout: float) -> bool:
        """Block until the feed changes (True) or `timeout` passes (False)."""

    def take(self) -> list[tuple[int, int, tuple[str | None, ...]]] | None:
        """What the changes heard since the last call touched: each one's kind, plant id and
        tags after and before (None: not known)."""

    def close(self) -> None: ...


class FeedSignal:
    """The process's watchers, their caps, and the listener that wakes them."""

    def __init__(
        self,
        listener: Callable[[], FeedListener | None],
        *,
        max_watchers: int,
        max_per_caller: int,
        cheap_to_listen: bool = False,
        sweep_every: int = 0,
    ) -> None:
        self._make_listener = listener
        #: The listener costs nothing while idle (a blocking read), so `listen` may keep it on.
        self._cheap_to_listen = cheap_to_listen
        self._always = False
        self._observers: list[Callable[[], None]] = []
        self.max_watchers, self.max_per_caller = max_watchers, max_per_caller
        self._lock = threading.Lock()
        self._version = 0
        self._wakes = WakeIndex(sweep_every)
        #: How many watches are parked (len(self._wakes), kept as a plain number for the writes).
        self.parked = 0
        #: How many watchers each change woke (the metric `plants_watch_woken_per_change`).
        self.woken = WokenTally()
        self.reads = SharedReads()
        self.gate = WakeGate()
        self._watchers: Counter[bytes] = Counter()
        self._someone_waits = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def version(self) -> int:
        return self._version

    # --- who watches -----------------------------------------------------------------------------

    def admit(self, caller: bytes) -> None:
        """Count a new watcher of `caller`; WatchersFull when a cap refuses it."""
        with self._lock:
            if sum(self._watchers.values()) >= self.max_watchers:
                raise WatchersFull(per_caller=False)
            if self._watchers[caller] >= self.max_per_caller:
                raise WatchersFull(per_caller=True)
            self._watchers[caller] += 1

    def release(self, caller: bytes) -> None:
        with self._lock:
            self._watchers[caller] -= 1
            if self._watchers[caller] <= 0:
                del self._watchers[caller]

    @property
    def watchers(self) -> int:
        return sum(self._watchers.values())

    # --- waking ----------------------------------------------------------------------------------

    def subscribe(self, seen: int, wake: Callable[[], None], only: EventFilter | None = None) -> None:
        """Call `wake` once when the feed has changed since version `seen` (at once if it has),
        by a change `only` may select (or any, at times: wake_index.py)."""
        with self._lock:
            changed = self._version != seen
            if not changed:
                self._wakes.add(wake, only)
                self.parked = len(self._wakes)
                if not self._someone_waits.is_set():  # set() notifies a condition: not per watcher
                    self._someone_waits.set()
        if changed:
            wake()
        else:
            self._start_listener()

    def unsubscribe(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakes.remove(wake)
            self.parked = len(self._wakes)
            if not self.parked and not self._always:
                self._someone_waits.clear()  # the listener rests until the next watcher

    def observe(self, callback: Callable[[], None]) -> None:
        """Call `callback` at every change (this process's webhook deliverer)."""
        self._observers.append(callback)

    def listen(self) -> None:
        """Hear other processes' writes from now on, even with no watcher, where that costs
        nothing while idle. Called after the fork: the listener is a thread."""
        if self._cheap_to_listen:
            self._always = True
            self._someone_waits.set()
            self._start_listener()

    def notify(self, change: Touched | None = None) -> None:
        """The feed changed: wake the watchers it may concern (every one when `change` is not
        known), and every observer. Every write calls it: with no watcher it is a counter, a flag
        and the observers (measured in bench/README.md)."""
        self._notify(None if change is None else [change])

    def _notify(self, changes: list[Touched] | None) -> None:
        """Wake the watchers `changes` may concern (None: every one), and every observer."""
        wakes: list[Callable[[], None]] = []
        with self._lock:
            self._version += 1
            if self.parked:
                wakes = self._wakes.take_all(changes)
                self.woken.observe(len(wakes))
                self.parked = len(self._wakes)
                if not self.parked and not self._always:
                    self._someone_waits.clear()
        for observer in self._observers:
            observer()
        for wake in wakes:
            try:
                wake()
            except Exception:
                log.exception("A feed watcher's wake-up failed")

    # --- hearing other processes -------------------------------------------------------------------

    def _start_listener(self) -> None:
        if self._thread is not None or self._closed:
            return
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._listen, name="feed-listener", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        listener = None
        failures, wake_at = 0, 0.0
        try:
            listener = self._make_listener()
            if listener is None:  # a per-process store: this process's writes are all there are
                return
            while not self._closed:
                self._someone_waits.wait(LISTEN_SECONDS)
                if self._closed or not self._someone_waits.is_set():
                    continue
                try:
                    changed = listener.wait(LISTEN_SECONDS)
                except Exception as exc:
                    failures += 1
                    wake_at = self._after_failure(exc, failures, wake_at)
                    continue
                if failures:  # back: what was written meanwhile, watchers read now
                    failures, changed = 0, True
                if changed:
                    touched = listener.take()
                    self._notify(None if touched is None else [Touched._make(t) for t in touched])
        finally:
            if listener is not None:
                listener.close()

    def _after_failure(self, exc: Exception, failures: int, wake_at: float) -> float:
        """The store is away. The first failure in a row wakes everyone to find out (a stream
        ends with its `retry:`); later ones wake them only at doubling intervals (1 s, 2 s, ...
        MAX_BACKOFF_SECONDS), since each wake-up has the watchers read a store that is not
        answering. Those reads share one failure (shared_reads.py) and take turns (wake_gate.py).
        Returns when the next failure may wake them."""
        now = time.monotonic()
        log.warning("The change feed's listener failed (%s, %d in a row)", type(exc).__name__, failures)
        if failures == 1 or now >= wake_at:
            self.notify()
            wake_at = now + min(MAX_BACKOFF_SECONDS, 2.0 ** (failures - 1))
        time.sleep(1.0)  # the listener's next try
        return wake_at

    def close(self) -> None:
        self._closed = True
        self._someone_waits.set()
