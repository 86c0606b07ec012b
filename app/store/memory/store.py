"""The default store: plants in this process's memory, behind one lock."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Collection
from typing import Any

from app.store.base import (
    CREATED_EVENT,
    DELETED_EVENT,
    KEEP,
    UNCONDITIONAL,
    UPDATED_EVENT,
    Change,
    CreateOutcome,
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
from app.store.memory.feed import FeedReads, MemoryFeed
from app.store.memory.table import SHARDS, PlantTable
from app.store.readiness import READY, Readiness
from app.store.url import StoreUrl


def _require(precondition: Precondition, name: str, tag: str | None) -> None:
    """PreconditionFailedError unless `precondition` lets a write change the plant (name, tag)."""
    if precondition is not UNCONDITIONAL and not precondition.allows(plant_etag(name, tag)):
        raise PreconditionFailedError


class MemoryPlantStore(FeedReads):
    """A thread-safe, bounded, per-process store: its plants (table.py), its change feed
    (feed.py) and its webhook endpoints (endpoints.py), each changed under one lock."""

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
        self._table = PlantTable()
        self._lock = threading.Lock()
        #: Each thread's last change's or delete's tag before (`tag_before`).
        self._before = threading.local()
        self._cursor_key = secrets.token_bytes(32)
        #: The rate limits' counters (a `limits` MemoryStorage) when the app counts here: a reload
        #: hands them over with the plants (snapshot.py), so that no window starts afresh.
        self.limit_counters: Any = None

    def create(self, plant_id: int, name: str, tag: str | None, *, origin: str = "") -> CreateOutcome:
        """Store the plant unless its id is taken; atomic under concurrent callers.

        Raises StoreFullError when the id is new and the store is at capacity.
        """
        shard = plant_id % SHARDS
        table = self._table
        names, tags = table.names[shard], table.tags[shard]
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
        table = self._table
        if table.count >= self.capacity:
            raise StoreFullError
        # The event holds the interned tag, not the request's own copy of it.
        tag = table.add(plant_id, name, tag)
        self._feed.append(CREATED_EVENT, plant_id, name, tag, origin, tag)

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
        table = self._table
        names, tags = table.names[shard], table.tags[shard]
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
                table.untag(plant_id)
                tag = table.tag(plant_id, tag)
            else:
                tag = stored_tag
            self._feed.append(UPDATED_EVENT, plant_id, name, tag, origin, stored_tag)
            self._before.tag = stored_tag
            return Change.CHANGED, Plant(name, tag)

    def get(self, plant_id: int) -> Plant | None:
        shard = plant_id % SHARDS
        table = self._table
        with self._lock:
            name = table.names[shard].get(plant_id)
            if name is None:
                return None
            return Plant(name, table.tags[shard].get(plant_id))

    def delete(self, plant_id: int, precondition: Precondition = UNCONDITIONAL, *, origin: str = "") -> bool:
        shard = plant_id % SHARDS
        table = self._table
        with self._lock:
            name = table.names[shard].get(plant_id)
            if name is None:
                return False
            tag = table.tags[shard].get(plant_id)
            _require(precondition, name, tag)
            table.remove(plant_id)
            self._feed.append(DELETED_EVENT, plant_id, name, tag, origin, tag)
            self._before.tag = tag
            return True

    def tag_before(self) -> tuple[str | None] | None:
        """Set in this thread, under the lock, by the change or delete just made: exact however
        many threads write. None (not known) in a thread that has made neither."""
        if not hasattr(self._before, "tag"):
            return None
        return (self._before.tag,)

    def write_mark(self) -> None:
        """None: no listener hears this store's writes again (`feed_listener`)."""
        return None

    def page(self, after: bytes | None, limit: int, tags: Collection[str] | None = None) -> Page:
        after_id = None if after is None else position_id(after)
        with self._lock:
            plants, more = self._table.page(after_id, limit, tags)
        return Page(plants, id_position(plants[-1][0]) if more else None)

    def cursor_key(self) -> bytes:
        """Random per store: cursors die with the process, as its plants do."""
        return self._cursor_key

    def __len__(self) -> int:
        return self._table.count

    def readiness(self) -> Readiness:
        return READY

    def ping(self) -> None:
        """Memory always answers."""

    def close(self) -> None:
        """Nothing to close: the plants live and die with the process."""
