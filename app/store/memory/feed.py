"""The memory store's change feed: the latest events in a ring, numbered by a counter that never
goes back, appended and read under the store's own lock."""

from __future__ import annotations

import secrets
import time

from app.store.base import Event, EventPage, FeedEntry, FeedExpiredError


class MemoryFeed:
    """At most `retain` events; the event numbered `n` (from 1) sits at `(n - 1) % retain`.

    Not thread-safe on its own: the store calls it with its lock held, so that an event is
    appended in the same step as its change.
    """

    def __init__(self, retain: int) -> None:
        if retain < 0:
            raise ValueError("retain must be >= 0")
        self.retain = retain
        self._ring: list[tuple[int, int, str, str | None, int]] = []
        #: Each event's origin, beside it: apart, so that a page makes its Events straight from the
        #: ring's tuples.
        self._origins: list[str] = []
        #: Each event's plant's tag before the change, beside it too (FeedEntry.tag_before).
        self._before: list[str | None] = []
        self._last = 0
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
        # A plain tuple, made an Event only when read: every change pays for the append.
        event = (kind, plant_id, name, tag, time.time_ns() // 1_000_000)
        self._last += 1
        if len(self._ring) < self.retain:
            self._ring.append(event)
            self._origins.append(origin)
            self._before.append(before)
        else:
            at = (self._last - 1) % self.retain
            self._ring[at] = event
            self._origins[at] = origin
            self._before[at] = before

    def page(self, after: bytes | None, limit: int) -> EventPage:
        """The events after `after` (the number of the last one read, as 8 bytes)."""
        dropped = self._last - len(self._ring)
        if after is None:
            number = dropped
        else:
            if len(after) != 8:
                raise ValueError("not a position of this store")
            number = int.from_bytes(after, "big")
            if number > self._last:
                raise ValueError("not a position of this store")
            if number < dropped:
                raise FeedExpiredError
        end = min(number + limit, self._last)
        ring, retain = self._ring, self.retain
        events = [Event._make(ring[(n - 1) % retain]) for n in range(number + 1, end + 1)]
        return EventPage(events, end.to_bytes(8, "big"))

    def entries(self, after: bytes | None, limit: int) -> tuple[list[FeedEntry], bytes]:
        events, end = self.page(after, limit)
        first = int.from_bytes(end, "big") - len(events)
        origins, before, retain = self._origins, self._before, self.retain
        return [
            FeedEntry(
                event,
                f"{self._epoch}-{n}",
                n.to_bytes(8, "big"),
                origins[(n - 1) % retain],
                before[(n - 1) % retain],
            )
            for n, event in enumerate(events, first + 1)
        ], end

    @staticmethod
    def count(position: bytes) -> int:
        if len(position) != 8:
            raise ValueError("not a position of this store")
        return int.from_bytes(position, "big")

    def now(self) -> bytes:
        return self._last.to_bytes(8, "big")
