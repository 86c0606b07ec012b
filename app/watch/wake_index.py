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

A watcher filed as one that moves at a turn without reading (a filtered stream on a shared store,
app/watch/passing_over.py) is not woken by the sweep: it is turned, every third of `sweep_every`,
its wake-up called and left filed, as at its deadline. It moves then to the feed's end it read at
its turn before, whose every event the listener has judged, and reads the end for the next: so
it stands at most two thirds of `sweep_every` changes behind, or `sweep_every` when one turn
found no read slot for the end (a read at each sweep: `sweep_every` too), without the read of
those events that, in every such stream at once, was the sweep's cost. A change not known takes
it as it takes everyone: its events were not judged.
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
    """A change: its kind, its plant's id, the tags it is known to have had (None: not known), and
    its write's own mark (None: none), by which a process knows a write it heard twice."""

    kind: int
    plant_id: int
    tags: tuple[str | None, ...] | None
    mark: bytes | None = None


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
        #: The filtered watchers that the sweep turns instead of waking (the module's docstring).
        self._turning: dict[int, Wake] = {}
        self._since_sweep = 0

    def __len__(self) -> int:
        return len(self._all) + len(self._keys)

    def __contains__(self, wake: object) -> bool:
        return id(wake) in self._all or id(wake) in self._keys

    def add(self, wake: Wake, only: EventFilter | None, turns: bool = False) -> None:
        """File `wake` under `only`; with `turns`, the sweep turns it instead of waking it."""
        if only is None:
            self._all[id(wake)] = wake
            return
        if turns:
            self._turning[id(wake)] = wake
        keys = self._keys[id(wake)] = keys_of(only)
        for key in keys:
            self._filed.setdefault(key, {})[id(wake)] = wake

    def remove(self, wake: Wake) -> None:
        if self._all.pop(id(wake), None) is not None:
            return
        self._turning.pop(id(wake), None)
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
        woken: dict[int, Wake] = {}  # a watcher turned, then taken by a later change: once
        for change in changes:
            woken.update((id(wake), wake) for wake in self.take(change, counted))
        return list(woken.values())

    def take(self, change: Touched | None, counted: bool = True) -> list[Wake]:
        """The wake-ups `change` calls for (None: every one), taken out of the index, and those of
        the watchers the sweep turns when it is their turn, left in it."""
        turned: dict[int, Wake] = {}
        sweep = False
        if change is not None and self.sweep_every and counted:
            self._since_sweep += 1
            if self._since_sweep % max(1, self.sweep_every // 3) == 0:
                turned = dict(self._turning)
            if self._since_sweep >= self.sweep_every:
                self._since_sweep, sweep = 0, True
        if change is None:
            self._since_sweep = 0
            return self._take_every(keep={})
        woken = turned
        woken.update((id(wake), wake) for wake in self._all.values())
        self._all = {}
        for key in self._keys_for(change):
            bucket = self._filed.get(key)
            if bucket:
                for wake in list(bucket.values()):
                    self.remove(wake)  # one it concerns reads, turned or not
                    woken[id(wake)] = wake
        if sweep:
            woken.update((id(wake), wake) for wake in self._take_every(keep=dict(self._turning)))
        return list(woken.values())

    def _take_every(self, keep: dict[int, Wake]) -> list[Wake]:
        """Every wake-up but those of `keep`, taken out of the index."""
        woken = list(self._all.values())
        self._all = {}
        filtered = [wake for number, wake in self._keys_wakes() if number not in keep]
        for wake in filtered:
            self.remove(wake)
        return woken + filtered

    def _keys_wakes(self) -> list[tuple[int, Wake]]:
        """Each filtered watcher's wake-up, once."""
        found: dict[int, Wake] = {}
        for bucket in self._filed.values():
            found.update(bucket)
        return list(found.items())

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
