"""The waiting watchers' wake-ups (parked by the worker or blocked in a thread), indexed by their
filter, so that a change wakes the watchers it may concern rather than all of them.

A watcher is filed under one part of its filter, the most selective it has: each of its `ids`,
else each of its `tags`, else each of its `types`; one without a filter under "all". A change of
this process names its type, its plant's id and its plant's tags after and before the change (a
delete's: the deleted plant's), as the store tells them (`tag_before`: on Redis, as the write's
script answered; a write whose reply was lost is not known, and wakes every watcher filed by
tag). A
change heard from the store's feed (another process's, on a shared store) names its plant's tag
after and before, read from the feed's entry; a burst too long to read entry by entry, or a
store that did not answer, is not known and wakes everyone. A woken watcher reads
the feed through its full filter, so a wake-up too many costs a read, never a wrong event.

Every `sweep_every` known changes everyone is woken anyway: a watcher that is never woken would
not move past what its filter passes over, and would fall out of the retention window. Between
two sweeps fewer events are written than the feed keeps. Where the store's listener hears this
process's own writes too, a change is counted as the listener hears it, not twice.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from app.watch.filters import EventFilter

Wake = Callable[[], None]
#: Where a watcher is filed: ("id", plant id), ("tag", tag) or ("type", kind).
Key = tuple[str, Any]
#: How many watchers a change woke: the upper bounds of the histogram's buckets.
WOKEN_BUCKETS = (0, 1, 2, 5, 10, 100, 1000, 10000)


class Touched(NamedTuple):
    """A change this process made: its kind, its plant's id, and the tags it is known to have had
    (None: not known)."""

    kind: int
    plant_id: int
    tags: tuple[str | None, ...] | None


def keys_of(only: EventFilter) -> list[Key]:
    if only.ids is not None:
        return [("id", plant_id) for plant_id in only.ids]
    if only.tags is not None:
        return [("tag", tag) for tag in only.tags]
    assert only.kinds is not None  # a filter names at least one part
    return [("type", kind) for kind in only.kinds]


class WakeIndex:
    """The wake-ups of one process's waiting watchers. Not thread-safe: the signal holds its lock."""

    def __init__(self, sweep_every: int = 0) -> None:
        self.sweep_every = sweep_every
        self._all: dict[int, Wake] = {}
        self._filed: dict[Key, dict[int, Wake]] = {}
        #: Each filtered watcher's keys, to take it out of every bucket it is in.
        self._keys: dict[int, list[Key]] = {}
        self._since_sweep = 0

    def __len__(self) -> int:
        return len(self._all) + len(self._keys)

    def __contains__(self, wake: object) -> bool:
        return id(wake) in self._all or id(wake) in self._keys

    def add(self, wake: Wake, only: EventFilter | None) -> None:
        if only is None:
            self._all[id(wake)] = wake
            return
        keys = self._keys[id(wake)] = keys_of(only)
        for key in keys:
            self._filed.setdefault(key, {})[id(wake)] = wake

    def remove(self, wake: Wake) -> None:
        if self._all.pop(id(wake), None) is not None:
            return
        for key in self._keys.pop(id(wake), ()):
            bucket = self._filed[key]
            del bucket[id(wake)]
            if not bucket:
                del self._filed[key]

    def take_all(self, changes: list[Touched] | None, counted: bool = True) -> list[Wake]:
        """The wake-ups any of `changes` calls for (None: every one), taken out of the index;
        without `counted`, the changes do not count towards the sweep (they will be heard again)."""
        if changes is None or len(changes) == 1:
            return self.take(None if changes is None else changes[0], counted)
        woken: list[Wake] = []
        for change in changes:
            woken.extend(self.take(change, counted))
        return woken

    def take(self, change: Touched | None, counted: bool = True) -> list[Wake]:
        """The wake-ups `change` calls for (None: every one), taken out of the index."""
        if change is not None and self.sweep_every and counted:
            self._since_sweep += 1
            if self._since_sweep >= self.sweep_every:
                change = None
        if change is None:
            self._since_sweep = 0
            woken = [
                *self._all.values(),
                *(wake for bucket in self._filed.values() for wake in bucket.values()),
            ]
            self._all, self._filed, self._keys = {}, {}, {}
            return list({id(wake): wake for wake in woken}.values())
        woken = list(self._all.values())
        self._all = {}
        for key in self._keys_for(change):
            bucket = self._filed.get(key)
            if bucket:
                for wake in list(bucket.values()):
                    self.remove(wake)
                    woken.append(wake)
        return woken

    def _keys_for(self, change: Touched) -> Iterable[Key]:
        yield ("id", change.plant_id)
        yield ("type", change.kind)
        if change.tags is None:
            yield from [key for key in self._filed if key[0] == "tag"]
        else:
            yield from (("tag", tag) for tag in change.tags if tag is not None)


class WokenTally:
    """How many watchers each change woke, while anyone watched: a histogram's counts."""

    def __init__(self) -> None:
        self.counts = [0] * (len(WOKEN_BUCKETS) + 1)  # the last: more than the last bound
        self.total = 0
        self.changes = 0
        #: Told each count too, when set: a histogram summed over the workers (app/metrics.py).
        self.forward: Callable[[int], None] | None = None

    def observe(self, woken: int) -> None:
        self.counts[bisect.bisect_left(WOKEN_BUCKETS, woken)] += 1
        self.total += woken
        self.changes += 1
        if self.forward is not None:
            self.forward(woken)
