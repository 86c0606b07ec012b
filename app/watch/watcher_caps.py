"""How many watches one process holds, in all and per caller: PLANTS_EVENTS_MAX_WATCHERS and
PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN (docs/change-feed.md, "Who may watch, and how many")."""

from __future__ import annotations

import threading
from collections import Counter


class WatchersFull(Exception):
    """A new watcher refused: the process has its most, or (`per_caller`) its caller has."""

    def __init__(self, *, per_caller: bool) -> None:
        super().__init__("per caller" if per_caller else "per process")
        self.per_caller = per_caller


class WatcherCaps:
    """The process's watchers by caller, within its caps."""

    def __init__(self, max_watchers: int, max_per_caller: int) -> None:
        self.max_watchers, self.max_per_caller = max_watchers, max_per_caller
        self._caps_lock = threading.Lock()
        self._watchers: Counter[bytes] = Counter()

    def admit(self, caller: bytes) -> None:
        """Count a new watcher of `caller`; WatchersFull when a cap refuses it."""
        with self._caps_lock:
            if sum(self._watchers.values()) >= self.max_watchers:
                raise WatchersFull(per_caller=False)
            if self._watchers[caller] >= self.max_per_caller:
                raise WatchersFull(per_caller=True)
            self._watchers[caller] += 1

    def release(self, caller: bytes) -> None:
        with self._caps_lock:
            self._watchers[caller] -= 1
            if self._watchers[caller] <= 0:
                del self._watchers[caller]

    @property
    def watchers(self) -> int:
        return sum(self._watchers.values())
