"""Which events a reader of the feed wants: `GET /events`'s `tags`, `ids` and `types`.

Different parameters combine with AND, the values of one with OR. An event is selected when its
plant matches **before or after** its change: its type is one of `types`, its id one of `ids`,
and its tag after the change or before it one of `tags`. So an update that moves a plant out of
a tag reaches that tag's follower, which sees the plant's new tag and drops it; a created plant
is matched by its tag, a deleted one by the tag it had.

A filtered read walks the feed past what does not match: it reads at most `budget` events, and
its position is then the end of what it read, matched or not, so that a follower that keeps
following stays inside the retention window however long its filter matches nothing.
"""

from __future__ import annotations

from typing import Any

from app.store import EVENT_TYPES, FeedEntry, PlantStore
from app.store.base import FeedSelection

#: The events one store call reads while a filtered read walks the feed.
SCAN_CHUNK = 1000
#: The most events one filtered page or long-poll read takes before it answers what it found.
SCAN_BUDGET = 10_000


class EventFilter(FeedSelection):
    """A reader's filter (the store's FeedSelection, made from a query); None in a field: that
    parameter was not given."""

    __slots__ = ()

    @classmethod
    def from_query(cls, query: dict[str, Any]) -> EventFilter | None:
        """The filter of a loaded `GET /events` query, or None when it has none."""
        tags, ids, types = query.get("tags"), query.get("ids"), query.get("types")
        if tags is None and ids is None and types is None:
            return None
        return cls(
            None if tags is None else frozenset(tags),
            None if ids is None else frozenset(ids),
            None if types is None else frozenset(EVENT_TYPES.index(name) for name in types),
        )


def scan(
    store: PlantStore, after: bytes | None, limit: int, only: EventFilter, budget: int = SCAN_BUDGET
) -> tuple[list[FeedEntry], bytes, bool, int]:
    """Up to `limit` entries after `after` that `only` selects, reading at most `budget` events;
    the position after the last event read, whether the read reached the feed's end, and how many
    events it read past the last one it selected (a stream tells its client its position once
    they add up: app/watch/watches.py). The store selects (`PlantStore.feed_select`), a chunk of
    the feed at a time."""
    found: list[FeedEntry] = []
    read = passed = 0
    while True:
        asked = min(SCAN_CHUNK, budget - read)
        chunk = store.feed_select(after, limit - len(found), only, read_most=asked)
        read += chunk.read
        found += chunk.entries
        passed = chunk.passed if chunk.entries else passed + chunk.passed
        if len(found) == limit:
            return found, chunk.end, chunk.at_end, 0
        if chunk.at_end:
            return found, chunk.end, True, passed
        if read >= budget:
            return found, chunk.end, False, passed
        after = chunk.end
