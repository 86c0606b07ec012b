"""The memory store's change feed: the latest events in a ring, numbered by a counter that never
goes back, appended and read under the store's own lock."""

from __future__ import annotations

import re
import secrets
import threading
import time
from array import array
from typing import Any

from app.store.base import Event, EventPage, FeedEntry, FeedExpiredError, FeedSelection, Selected

#: A request id the service made (or nginx's $request_id): kept as its 128-bit int, 48 bytes
#: where its 32-character str takes 88.
_HEX_ID = re.compile(r"[0-9a-f]{32}").fullmatch


def _pack(origin: str) -> str | int:
    return int(origin, 16) if len(origin) == 32 and _HEX_ID(origin) else origin


def _unpack(origin: str | int) -> str:
    return origin if isinstance(origin, str) else f"{origin:032x}"


class MemoryFeed:
    """At most `retain` events; the event numbered `n` (from 1) sits at `(n - 1 - offset) % retain`,
    `offset` being the number of the event before the ring's first slot (0 but in a feed carried
    over from a reload's snapshot kept with another `retain`: `carry`).

    The ring is kept in columns, one per field of an event, rather than a tuple per event: a
    tuple, its time's int object and its slot cost about 120 bytes an event, the columns 41 (the
    kind in a bytearray, the time in an array of int64; the plant's id, name and tag are the
    store's own objects). Not thread-safe on its own: the store calls it with its lock held, so
    that an event is appended in the same step as its change.
    """

    def __init__(self, retain: int) -> None:
        if retain < 0:
            raise ValueError("retain must be >= 0")
        self.retain = retain
        self._kinds = bytearray()
        self._plants: list[int] = []
        self._names: list[str] = []
        self._tags: list[str | None] = []
        self._times = array("q")
        #: Each event's origin: a deliverer reads it, a page never does.
        self._origins: list[str | int] = []
        #: Each event's plant's tag before the change (FeedEntry.tag_before): the same object as
        #: its tag but for an update that moved the plant, so it adds a slot, not a string.
        self._before: list[str | None] = []
        self._last = 0
        self._offset = 0
        #: Event ids start with it: the numbers start again with the process, the ids never repeat.
        self._epoch = secrets.token_hex(6)

    def append(
        self,
        kind: int,
        plant_id: int,
        name: str,
        tag: str | None,
        origin: str = "",
        before: str | None = None,
    ) -> None:
        """Record a change; `before` is the plant's tag before it (an update's; else `tag`)."""
        if not self.retain:
            return
        now_ms = time.time_ns() // 1_000_000
        self._last += 1
        if len(self._kinds) < self.retain:
            self._kinds.append(kind)
            self._plants.append(plant_id)
            self._names.append(name)
            self._tags.append(tag)
            self._times.append(now_ms)
            self._origins.append(_pack(origin))
            self._before.append(before)
        else:
            at = (self._last - 1 - self._offset) % self.retain
            self._kinds[at] = kind
            self._plants[at] = plant_id
            self._names[at] = name
            self._tags[at] = tag
            self._times[at] = now_ms
            self._origins[at] = _pack(origin)
            self._before[at] = before

    def _start(self, after: bytes | None) -> int:
        """The number of the last event read at `after` (the oldest kept's predecessor for None)."""
        dropped = self._last - len(self._kinds)
        if after is None:
            return dropped
        if len(after) != 8:
            raise ValueError("not a position of this store")
        number = int.from_bytes(after, "big")
        if number > self._last:
            raise ValueError("not a position of this store")
        if number < dropped:
            raise FeedExpiredError
        return number

    def page(self, after: bytes | None, limit: int) -> EventPage:
        """The events after `after` (the number of the last one read, as 8 bytes)."""
        number = self._start(after)
        end = min(number + limit, self._last)
        retain, offset = self.retain, self._offset
        kinds, plants, names, tags, times = self._kinds, self._plants, self._names, self._tags, self._times
        events = []
        for n in range(number + 1, end + 1):
            at = (n - 1 - offset) % retain
            events.append(Event(kinds[at], plants[at], names[at], tags[at], times[at]))
        return EventPage(events, end.to_bytes(8, "big"))

    def entries(self, after: bytes | None, limit: int) -> tuple[list[FeedEntry], bytes]:
        events, end = self.page(after, limit)
        first = int.from_bytes(end, "big") - len(events)
        origins, before, retain, offset = self._origins, self._before, self.retain, self._offset
        return [
            FeedEntry(
                event,
                f"{self._epoch}-{n}",
                n.to_bytes(8, "big"),
                _unpack(origins[(n - 1 - offset) % retain]),
                before[(n - 1 - offset) % retain],
            )
            for n, event in enumerate(events, first + 1)
        ], end

    def _entry(self, n: int) -> FeedEntry:
        at = (n - 1 - self._offset) % self.retain
        event = Event(self._kinds[at], self._plants[at], self._names[at], self._tags[at], self._times[at])
        return FeedEntry(
            event, f"{self._epoch}-{n}", n.to_bytes(8, "big"), _unpack(self._origins[at]), self._before[at]
        )

    @staticmethod
    def count(position: bytes) -> int:
        if len(position) != 8:
            raise ValueError("not a position of this store")
        return int.from_bytes(position, "big")

    def now(self) -> bytes:
        return self._last.to_bytes(8, "big")

    def carry(self, kept: dict[str, Any]) -> None:
        """Take over the feed a reload's snapshot kept with another `retain`: its latest events
        that fit, under their numbers, and its count. A position from before the reload then
        means what it meant: followed on, or 410 once its next event is not kept. Starting again
        from 0 made an old position a place in the new feed, which skipped the events before it
        unsaid. A feed kept in another form (an earlier version's) carries its count only, and
        one kept while off (`retain` 0) no position: writes went unrecorded meanwhile."""
        last = kept.get("_last")
        if not isinstance(last, int):
            return
        if kept.get("retain") == 0:
            last += 1  # past every earlier position: each is 410
        if last <= self._last:
            return
        columns = ("_kinds", "_plants", "_names", "_tags", "_times", "_origins", "_before")
        carried = 0
        if all(name in kept for name in (*columns, "retain")):
            old_retain, old_offset = kept["retain"], kept.get("_offset", 0)
            carried = min(len(kept["_kinds"]), self.retain)
            slots = [(n - 1 - old_offset) % old_retain for n in range(last - carried + 1, last + 1)]
            for name in columns:
                column = getattr(self, name)
                del column[:]
                column.extend(kept[name][at] for at in slots)
            self._epoch = kept.get("_epoch", self._epoch)
        self._last, self._offset = last, last - carried


def select_from(
    feed: MemoryFeed, after: bytes | None, limit: int, selection: FeedSelection, read_most: int
) -> Selected:
    """`FeedSelection.pick` of the feed's `entries(after, read_most)`, judged on the columns: an entry is
    made only for an event selected, so that passing over a stretch no filter of a watch
    matches costs a scan of its slots, not an object per event."""
    number = feed._start(after)
    end = min(number + read_most, feed._last)
    numbers: list[int] = []
    first = number + 1
    while first <= end and len(numbers) < limit:
        at = (first - 1 - feed._offset) % feed.retain
        until = min(end, first + feed.retain - at - 1)  # this run of slots, up to the ring's end
        numbers += [first + i for i in _selected(feed, at, at + until - first + 1, selection)]
        first = until + 1
    found = [feed._entry(n) for n in numbers[:limit]]
    if len(found) == limit:
        last = numbers[limit - 1]
        return Selected(found, last.to_bytes(8, "big"), last - number, 0, last == end < number + read_most)
    passed = end - numbers[-1] if numbers else end - number
    return Selected(found, end.to_bytes(8, "big"), end - number, passed, end < number + read_most)


def _selected(feed: MemoryFeed, start: int, stop: int, selection: FeedSelection) -> list[int]:
    """The offsets in the feed's slots `start` to `stop` of the events `selection` selects. A
    filter by ids or tags rules out a run with no value of it in a set's C loop first."""
    plants, tags, before = feed._plants, feed._tags, feed._before
    if selection.ids is not None:
        ids, run = selection.ids, plants[start:stop]
        if ids.isdisjoint(run):
            return []
        offsets: Any = [i for i, plant_id in enumerate(run) if plant_id in ids]
    elif selection.tags is not None:
        wanted, after_run, before_run = selection.tags, tags[start:stop], before[start:stop]
        if wanted.isdisjoint(after_run) and wanted.isdisjoint(before_run):
            return []
        offsets = [
            i
            for i, (tag, was) in enumerate(zip(after_run, before_run, strict=True))
            if tag in wanted or was in wanted
        ]
    else:
        offsets = range(stop - start)
    kinds = feed._kinds
    return [
        i
        for i in offsets
        if selection.selects(kinds[start + i], plants[start + i], tags[start + i], before[start + i])
    ]


class FeedReads:
    """The feed's reads that the store answers (the PlantStore protocol's), each under the
    store's lock: a part of MemoryPlantStore (its base class), as flask-smorest composes its Api
    and Blueprint of one class per concern."""

    _lock: threading.Lock
    _feed: MemoryFeed

    def events(self, after: bytes | None, limit: int) -> EventPage:
        with self._lock:
            return self._feed.page(after, limit)

    def feed_listener(self) -> None:
        """None: only this process writes to its store, and its writes notify their watchers."""
        return None

    def events_now(self) -> bytes:
        with self._lock:
            return self._feed.now()

    def feed_entries(
        self, after: bytes | None, limit: int, *, read_on: bool = False
    ) -> tuple[list[FeedEntry], bytes]:
        # `read_on` changes nothing here: the ring never loses an event it numbered.
        with self._lock:
            return self._feed.entries(after, limit)

    def feed_select(
        self, after: bytes | None, limit: int, selection: FeedSelection, *, read_most: int
    ) -> Selected:
        with self._lock:
            return select_from(self._feed, after, limit, selection, read_most)

    def feed_count(self, position: bytes) -> int:
        return self._feed.count(position)
