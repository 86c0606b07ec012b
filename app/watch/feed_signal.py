"""This process's watchers of the change feed: woken when it changes.

A write of this process notifies at once (`notify`), naming the change, which wakes the watchers
whose filter it may concern (wake_index.py). On a shared store, the feed's listener thread hears
every other process's writes too (feed_listener.py). It runs while someone watches (and a minute
past the last), or for good where the process delivers webhooks (`listen`), until `close`.

Watchers woken by one change mostly read the same page from the same position: `reads` makes
that read once per change and hands the others the same answer (shared_reads.py); `gate` bounds
how many woken watchers take a request thread at once (wake_gate.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from app.watch.feed_ends import FeedEnds
from app.watch.feed_listener import FeedListener, FeedListenerThread
from app.watch.filters import EventFilter
from app.watch.judged_once import JudgedOnce
from app.watch.shared_reads import SharedReads
from app.watch.wake_gate import WakeGate
from app.watch.wake_index import Touched, WakeIndex, WokenTally
from app.watch.watcher_caps import WatcherCaps

log = logging.getLogger(__name__)


class FeedSignal(WatcherCaps):
    """The process's watchers, their caps (watcher_caps.py), and the feed's listener that wakes them."""

    def __init__(
        self,
        feed_listener: Callable[[], FeedListener | None],
        *,
        max_watchers: int,
        max_per_caller: int,
        cheap_to_listen: bool = False,
        sweep_every: int = 0,
    ) -> None:
        #: The listener costs nothing while idle (a blocking read), so `listen` may keep it on.
        self._cheap_to_listen = cheap_to_listen
        self._always = False
        self._observers: list[Callable[[], None]] = []
        super().__init__(max_watchers, max_per_caller)
        self._lock = threading.Lock()
        self._version = 0
        self._wakes = WakeIndex(sweep_every)
        #: How many watches wait for a change, however they wait: parked by the packaged worker or
        #: blocked in a request thread elsewhere (len(self._wakes), a plain number for the writes).
        self.waiting = 0
        #: How many watchers each change woke (the metric `plants_watch_woken_per_change`).
        self.woken = WokenTally()
        self._judged = JudgedOnce()  # writes judged once, by `notify` or by the listener
        self.reads = SharedReads()
        self.gate = WakeGate()
        #: The feed's end, read for the filtered streams that pass over it (passing_over.py).
        self.ends = FeedEnds()
        self._someone_waits = threading.Event()
        #: How far the listener had heard the feed at its last wake-up (listener.py: `Heard`), or None.
        self._heard: Any = None
        self._feed_listener = FeedListenerThread(feed_listener, self._someone_waits, self._notify, self._lock)
        self.stopping = False  # `stop_watches`: every watch ends at its next turn

    @property
    def version(self) -> int:
        return self._version

    # --- waking ----------------------------------------------------------------------------------

    def subscribe(
        self, seen: int, wake: Callable[[], None], only: EventFilter | None = None, turns: bool = False
    ) -> None:
        """Call `wake` once when the feed has changed since version `seen` (at once if it has),
        by a change `only` may select (or any, at times: wake_index.py; `turns`: the sweep calls
        it, left filed, for a turn). Filed (`WakeIndex.add`) until a change takes it: this
        process's write (`notify`) or another's, heard by the listener (feed_listener.py). `wake`
        is the packaged worker's `Registry.wake`, or the Event of a watch blocked in its thread."""
        with self._lock:
            # Still filed: no change since concerns it (a turn at its deadline), unless its watch
            # asked to read on at once (a `seen` the feed never has), or the process stops.
            changed = self.stopping or (self._version != seen and (seen < 0 or wake not in self._wakes))
            if not changed:
                self._wakes.add(wake, only, turns)
                self.waiting = len(self._wakes)
                if not self._someone_waits.is_set():  # set() notifies a condition: not per watcher
                    self._someone_waits.set()
        if changed:
            wake()
        else:
            self._feed_listener.start()

    def stop_watches(self) -> None:
        """The process stops: every watch ends at its next turn, each waiting now woken for it (under
        gthread a watch holds a request thread, which the worker's exit and a reload wait for)."""
        self.stopping = True  # before the wake-ups: one filed after them sees it (`subscribe`)
        self._notify(None, counted=False)

    def unsubscribe(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakes.remove(wake)
            self.waiting = len(self._wakes)
            if not self.waiting and not self._always:
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
            self._feed_listener.start()

    def notify(self, change: Touched | None = None) -> None:
        """The feed changed: wake the watchers it may concern (every one when `change` is not
        known), and every observer. Every write calls it (`PlantsState.count_event`): with no
        watcher it is a counter, a flag and the observers (measured in bench/README.md). A write
        the listener hears again is counted once; one with a mark, judged once (judged_once.py)."""
        counted = self._heard is None or (change is not None and change.mark is not None)
        self._notify(None if change is None else [change], None, counted)

    def _notify(self, changes: list[Touched] | None, heard: Any = None, counted: bool = True) -> None:
        """Wake the watchers `changes` may concern (None: all), and the observers; `heard`: see `quiet`."""
        wakes: list[Callable[[], None]] = []
        with self._lock:
            if heard is not None:
                self._heard = heard
            if changes and self.waiting and not (changes := self._judged.first(changes)):
                return  # each judged already: its watchers were woken then, and the version moved
            self._version += 1
            if self.waiting:
                wakes = self._wakes.take_all(changes, counted)
                self.woken.observe(len(wakes))
                self.waiting = len(self._wakes)
                if not self.waiting and not self._always:
                    self._someone_waits.clear()
        for observer in self._observers:
            observer()
        for wake in wakes:
            try:
                wake()
            except Exception:
                log.exception("A feed watcher's wake-up failed")

    # --- passing over what concerns no one --------------------------------------------------------

    @property
    def hears(self) -> bool:
        """Whether the listener tells how far it heard the feed (a shared store's, once started)."""
        return self._heard is not None

    def quiet(self, wake: Callable[[], None], ahead: bytes | None) -> tuple[int, bool] | None:
        """If `wake` is still filed (no change since concerns its watcher), the feed's version and
        whether every event up to the position `ahead` had been heard, and judged, by then: all
        passed over this watcher. None otherwise. One step under the lock: a change judged after
        it may take the watcher, which is then read from wherever it moves."""
        with self._lock:
            if wake not in self._wakes:
                return None
            heard = self._heard
            return self._version, ahead is not None and heard is not None and heard.covers(ahead)

    def close(self, timeout: float = 5.0) -> bool:
        """End the feed's listener for good (its thread, its connections), waiting up to `timeout`
        seconds; whether it has ended. The watchers left are not woken: the app's owner is done."""
        return self._feed_listener.close(timeout)
