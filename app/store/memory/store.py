"""The default store: plants in this process's memory, behind one lock."""

from __future__ import annotations

import heapq
import secrets
import sys
import threading
from collections.abc import Collection, Iterator
from itertools import islice
from typing import Any

from sortedcontainers import SortedList

from app.store.base import (
    CREATED_EVENT,
    DELETED_EVENT,
    KEEP,
    UNCONDITIONAL,
    UPDATED_EVENT,
    Change,
    CreateOutcome,
    EventPage,
    FeedEntry,
    Page,
    Plant,
    Precondition,
    PreconditionFailedError,
    StoreFullError,
    id_position,
    plant_etag,
    position_id,
)
from app.store.memory.endpoints import MemoryEndpoints
from app.store.memory.feed import MemoryFeed
from app.store.readiness import READY, Readiness
from app.store.url import StoreUrl

#: The plants are spread over this many pairs of dicts, by id. A dict that outgrows its table is
#: copied whole, under the lock and the GIL: with hundreds of thousands of plants in one pair, a
#: growth paused every request for tens of milliseconds (bench/README.md). Spread, a growth
#: copies a thousandth.
SHARDS = 1024


def _require(precondition: Precondition, name: str, tag: str | None) -> None:
    """PreconditionFailedError unless `precondition` lets a write change the plant (name, tag)."""
    if precondition is not UNCONDITIONAL and not precondition.allows(plant_etag(name, tag)):
        raise PreconditionFailedError


class MemoryPlantStore:
    """A thread-safe, bounded, per-process store: dicts for the plants, sorted lists for pages.

    Names and tags live in separate dicts keyed by id rather than as one record object per
    plant: at a million plants a tuple per plant costs ~20 bytes more. Tags repeat, so they are
    interned and shared. Each is spread over SHARDS dicts by id, so no growth pauses the store.
    Pages come from a SortedList of every id and one per tag, which hold references to the
    dicts' own int objects (about 8 bytes a plant each).
    """

    shared = False

    SCHEMES = ("memory",)

    @classmethod
    def from_url(
        cls, url: StoreUrl, *, capacity: int, events_retain: int, min_replicas: int, **_: Any
    ) -> MemoryPlantStore:
        if min_replicas:
            raise ValueError("names the memory store, which has no replicas for PLANTS_STORE_MIN_REPLICAS")
        return cls(capacity, events_retain)

    def __init__(self, capacity: int, events_retain: int = 0) -> None:
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.capacity = capacity
        self.events_retain = events_retain
        self._feed = MemoryFeed(events_retain)
        self.endpoints = MemoryEndpoints()
        self._names: list[dict[int, str]] = [{} for _ in range(SHARDS)]
        self._tags: list[dict[int, str]] = [{} for _ in range(SHARDS)]
        self._count = 0
        self._ids = SortedList()
        self._ids_by_tag: dict[str, SortedList] = {}
        self._lock = threading.Lock()
        #: Each thread's last change's or delete's tag before (`tag_before`).
        self._before = threading.local()
        self._cursor_key = secrets.token_bytes(32)

    def create(self, plant_id: int, name: str, tag: str | None, *, origin: str = "") -> CreateOutcome:
        """Store the plant unless its id is taken; atomic under concurrent callers.

        Raises StoreFullError when the id is new and the store is at capacity.
        """
        shard = plant_id % SHARDS
        names, tags = self._names[shard], self._tags[shard]
        with self._lock:
            stored_name = names.get(plant_id)
            if stored_name is not None:
                if stored_name == name and tags.get(plant_id) == tag:
                    return CreateOutcome.IDENTICAL
                return CreateOutcome.CONFLICT
            self._insert(plant_id, name, tag, origin)
            return CreateOutcome.CREATED

    def _insert(self, plant_id: int, name: str, tag: str | None, origin: str) -> None:
        """Add a new plant and its created event (the lock held), or StoreFullError at capacity."""
        if self._count >= self.capacity:
            raise StoreFullError
        self._names[plant_id % SHARDS][plant_id] = name
        self._count += 1
        self._ids.add(plant_id)
        # The event holds the interned tag, not the request's own copy of it.
        tag = self._tag(plant_id, tag)
        self._feed.append(CREATED_EVENT, plant_id, name, tag, origin, tag)

    def _tag(self, plant_id: int, tag: str | None) -> str | None:
        """Index the plant under its tag; the tag, interned (None for none)."""
        if tag is not None:
            tag = self._tags[plant_id % SHARDS][plant_id] = sys.intern(tag)
            tagged = self._ids_by_tag.get(tag)
            if tagged is None:
                tagged = self._ids_by_tag[tag] = SortedList()
            tagged.add(plant_id)
        return tag

    def _untag(self, plant_id: int) -> None:
        tag = self._tags[plant_id % SHARDS].pop(plant_id, None)
        if tag is not None:
            tagged = self._ids_by_tag[tag]
            tagged.remove(plant_id)
            if not tagged:
                del self._ids_by_tag[tag]

    def change(
        self,
        plant_id: int,
        name: Any,
        tag: Any,
        precondition: Precondition,
        *,
        create: bool,
        origin: str = "",
    ) -> tuple[Change, Plant | None]:
        """Check the precondition and change the plant under the lock that guards every write."""
        shard = plant_id % SHARDS
        names, tags = self._names[shard], self._tags[shard]
        with self._lock:
            stored_name = names.get(plant_id)
            if stored_name is None:
                if not create or precondition.if_match is not None:
                    return Change.ABSENT, None
                tag = None if tag is KEEP else tag
                self._insert(plant_id, name, tag, origin)
                return Change.CREATED, Plant(name, tag)
            stored_tag = tags.get(plant_id)
            _require(precondition, stored_name, stored_tag)
            name = stored_name if name is KEEP else name
            tag = stored_tag if tag is KEEP else tag
            if name == stored_name and tag == stored_tag:
                return Change.UNCHANGED, Plant(name, tag)
            names[plant_id] = name
            if tag != stored_tag:
                self._untag(plant_id)
                tag = self._tag(plant_id, tag)
            else:
                tag = stored_tag
            self._feed.append(UPDATED_EVENT, plant_id, name, tag, origin, stored_tag)
            self._before.tag = stored_tag
            return Change.CHANGED, Plant(name, tag)

    def get(self, plant_id: int) -> Plant | None:
        shard = plant_id % SHARDS
        with self._lock:
            name = self._names[shard].get(plant_id)
            if name is None:
                return None
            return Plant(name, self._tags[shard].get(plant_id))

    def delete(self, plant_id: int, precondition: Precondition = UNCONDITIONAL, *, origin: str = "") -> bool:
        shard = plant_id % SHARDS
        names = self._names[shard]
        with self._lock:
            name = names.get(plant_id)
            if name is None:
                return False
            tag = self._tags[shard].get(plant_id)
            _require(precondition, name, tag)
            del names[plant_id]
            self._count -= 1
            self._ids.remove(plant_id)
            self._untag(plant_id)
            self._feed.append(DELETED_EVENT, plant_id, name, tag, origin, tag)
            self._before.tag = tag
            return True

    def tag_before(self) -> tuple[str | None] | None:
        """Set in this thread, under the lock, by the change or delete just made: exact however
        many threads write. None (not known) in a thread that has made neither."""
        if not hasattr(self._before, "tag"):
            return None
        return (self._before.tag,)

    def page(self, after: bytes | None, limit: int, tags: Collection[str] | None = None) -> Page:
        after_id = None if after is None else position_id(after)
        with self._lock:
            if tags is None:
                ids: Iterator[int] = self._above(self._ids, after_id)
            else:
                # A plant has one tag, so the tags' lists are disjoint: a merge never repeats an id.
                ids = heapq.merge(
                    *(self._above(self._ids_by_tag[tag], after_id) for tag in tags if tag in self._ids_by_tag)
                )
            found = list(islice(ids, limit + 1))
            names, stored_tags = self._names, self._tags
            plants = [
                (plant_id, names[plant_id % SHARDS][plant_id], stored_tags[plant_id % SHARDS].get(plant_id))
                for plant_id in found[:limit]
            ]
        return Page(plants, id_position(plants[-1][0]) if len(found) > limit else None)

    @staticmethod
    def _above(ids: SortedList, after: int | None) -> Iterator[int]:
        return ids.irange(minimum=after, inclusive=(False, True))

    def events(self, after: bytes | None, limit: int) -> EventPage:
        with self._lock:
            return self._feed.page(after, limit)

    def feed_listener(self) -> None:
        """None: only this process writes to its store, and its writes notify their watchers."""
        return None

    def events_now(self) -> bytes:
        with self._lock:
            return self._feed.now()

    def feed_entries(self, after: bytes | None, limit: int) -> tuple[list[FeedEntry], bytes]:
        with self._lock:
            return self._feed.entries(after, limit)

    def feed_count(self, position: bytes) -> int:
        return self._feed.count(position)

    def cursor_key(self) -> bytes:
        """Random per store: cursors die with the process, as its plants do."""
        return self._cursor_key

    def __len__(self) -> int:
        return self._count

    def readiness(self) -> Readiness:
        return READY

    def ping(self) -> None:
        """Memory always answers."""
