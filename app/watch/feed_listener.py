"""The thread that hears other processes' writes to a shared store (its `feed_listener()`:
blocking reads of the feed's streams) and hands each change to the feed signal (feed_signal.py).

It starts with the first watcher (or `listen`) and rests while no one waits; after IDLE_END_SECONDS
with no watcher (and no `listen`) it ends, its connections closed, and the next watcher starts it
again. `close` ends it for good, within a bound: the app's owner is done with the app
(app/extension.py: `PlantsState.close`).
A listener that fails (the store is away, or a cluster's client cannot even be made) wakes the
watchers once, then at growing intervals: each wake-up would have them read a store that is not
answering.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from app.watch.wake_index import Touched

#: The signal's logger: its lines read as they did before the thread had a module of its own.
log = logging.getLogger("app.watch.feed_signal")
#: Seconds a listener blocks in one call; it checks for watchers between calls.
LISTEN_SECONDS = 5.0
#: While the listener keeps failing, it wakes the watchers at intervals doubling up to this.
MAX_BACKOFF_SECONDS = 30.0
#: After this long with no watcher, the listener ends: a store no one watches any more (an app
#: its owner dropped, a Redis that went away) is not kept open, or retried, by this process.
IDLE_END_SECONDS = 60.0


class FeedListener(Protocol):
    def wait(self, timeout: float) -> bool:
        """Block until the feed changes (True) or `timeout` passes (False)."""

    def take(self) -> list[tuple[int, int, tuple[str | None, ...], bytes | None]] | None:
        """What the changes heard since the last call touched: each one's kind, plant id, tags
        after and before, and its write's mark (None: none); None: not known."""

    #: How far the feed had been heard at the last `take` (its `covers(position)`), or None.
    heard: Any

    def close(self) -> None: ...


class FeedListenerThread:
    """One process's listener of the feed, in a thread of its own: it waits on `someone_waits`
    (set and cleared by the signal, under its lock) and passes what it hears to `notify` (the
    changes, or None: not known, wake every watcher; and how far the feed was heard)."""

    def __init__(
        self,
        make_listener: Callable[[], FeedListener | None],
        someone_waits: threading.Event,
        notify: Callable[[list[Touched] | None, Any], None],
        lock: threading.Lock,
    ) -> None:
        self._make_listener = make_listener
        self._someone_waits = someone_waits
        self._notify = notify
        self._lock = lock
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        #: The thread's listener while it has one: `close` closes it, which ends its blocking wait.
        self._listener: FeedListener | None = None

    def start(self) -> None:
        """Start the thread unless it runs already (or was closed); from any thread."""
        if self._thread is not None or self._closed.is_set():
            return
        with self._lock:
            if self._thread is not None or self._closed.is_set():
                return
            thread = self._thread = threading.Thread(target=self._listen, name="feed-listener", daemon=True)
        thread.start()

    def _listen(self) -> None:
        listener = None
        failures, wake_at = 0, 0.0
        quiet_since = time.monotonic()
        try:
            while not self._closed.is_set():
                if not self._someone_waits.wait(LISTEN_SECONDS):
                    if time.monotonic() - quiet_since >= IDLE_END_SECONDS and self._end_idle():
                        return
                    continue
                if self._closed.is_set():
                    return
                try:
                    if listener is None:
                        # A cluster's client reads the slot map as it is made: while the cluster
                        # is down, making it fails as a read does, and is tried again.
                        listener = self._listener = self._make_listener()
                        if listener is None:  # a per-process store: its own writes are all there are
                            return
                        if self._closed.is_set():  # closed while it was made: `close` missed it
                            return
                    changed = listener.wait(LISTEN_SECONDS)
                except Exception as exc:
                    if self._closed.is_set():  # closed under it: not the store's failure
                        return
                    failures += 1
                    wake_at = self._after_failure(exc, failures, wake_at)
                    continue
                finally:
                    quiet_since = time.monotonic()
                if self._closed.is_set():
                    return
                if failures:  # back: what was written meanwhile, watchers read now
                    failures, changed = 0, True
                if changed:
                    touched = listener.take()
                    changes = None if touched is None else [Touched._make(t) for t in touched]
                    self._notify(changes, getattr(listener, "heard", None))
        finally:
            if listener is not None:
                listener.close()

    def _end_idle(self) -> bool:
        """No one has waited for IDLE_END_SECONDS: end this thread unless a watcher just came
        (decided under the signal's lock, which a new watcher takes to say it waits: then it
        sees no thread, and starts one)."""
        with self._lock:
            if self._someone_waits.is_set():
                return False
            self._thread = self._listener = None
        return True

    def _after_failure(self, exc: Exception, failures: int, wake_at: float) -> float:
        """The store is away. The first failure in a row wakes everyone to find out (a stream
        ends with its `retry:`); later ones wake them only at doubling intervals (1 s, 2 s, ...
        MAX_BACKOFF_SECONDS), since each wake-up has the watchers read a store that is not
        answering. Those reads share one failure (shared_reads.py) and take read slots (wake_gate.py).
        Returns when the next failure may wake them."""
        now = time.monotonic()
        log.warning("The change feed's listener failed (%s, %d in a row)", type(exc).__name__, failures)
        if failures == 1 or now >= wake_at:
            self._notify(None, None)
            wake_at = now + min(MAX_BACKOFF_SECONDS, 2.0 ** (failures - 1))
        self._closed.wait(1.0)  # the listener's next try, unless closed meanwhile
        return wake_at

    def close(self, timeout: float = 5.0) -> bool:
        """End the thread for good, its listener (and that listener's connections) closed; wait
        for it up to `timeout` seconds. Whether it has ended. From any thread, more than once."""
        with self._lock:
            self._closed.set()
            thread = self._thread
        self._someone_waits.set()
        listener = self._listener
        if listener is not None:
            listener.close()  # ends its blocking wait now, not after LISTEN_SECONDS
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()
