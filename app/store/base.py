"""What every plant store is: the interface the blueprint uses, its outcomes and its failures."""

from __future__ import annotations

import enum
from collections.abc import Collection
from typing import NamedTuple, Protocol


class Outcome(enum.Enum):
    """What a create did."""

    CREATED = "created"
    #: A plant with this id and the same name and tag was already stored (a retry).
    IDENTICAL = "identical"
    #: A plant with this id but another name or tag is stored; nothing changed.
    CONFLICT = "conflict"


class Plant(NamedTuple):
    name: str
    tag: str | None = None


#: A plant of a page: its id, name and tag. (A plain tuple: a page has up to 1,000 of them.)
StoredPlant = tuple[int, str, str | None]


class Page(NamedTuple):
    """Up to `limit` plants, and where the next page starts (None after the last page).

    `next` is the store's own position, opaque to the caller, who signs it into a cursor and
    passes it back as the next page's `after`.
    """

    plants: list[StoredPlant]
    next: bytes | None


def id_position(plant_id: int) -> bytes:
    """The position after `plant_id` in a store that pages in id order."""
    return plant_id.to_bytes(8, "big", signed=True)


def position_id(position: bytes) -> int:
    """The id an `id_position` names; ValueError for anything else."""
    if len(position) != 8:
        raise ValueError("not a position of this store")
    return int.from_bytes(position, "big", signed=True)


class StoreFullError(Exception):
    """The store holds its capacity of plants (or its server its memory) and cannot take a new one."""


class StoreUnavailableError(Exception):
    """The store did not answer in time, or cannot write now; the request may be retried.

    `reason` is one of `timeout`, `connection`, `read_only`, `needs_migration`, `cluster` (a
    failover, or a slot moving between nodes), `replication` (fewer replicas confirmed a write
    than PLANTS_STORE_MIN_REPLICAS) or `other`. The message names what failed, for the log; it
    never contains a password.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PlantStore(Protocol):
    """What the blueprint needs of a store. Implementations must be thread-safe."""

    #: True when every process that uses the same settings sees the same plants.
    shared: bool

    def create(self, plant_id: int, name: str, tag: str | None) -> Outcome:
        """Store the plant unless its id is taken, atomically.

        Raises StoreFullError at capacity, StoreUnavailableError when the store cannot answer.
        """
        ...

    def get(self, plant_id: int) -> Plant | None: ...

    def delete(self, plant_id: int) -> bool:
        """Remove the plant and free its place under the capacity, atomically; False when absent."""
        ...

    def page(self, after: bytes | None, limit: int, tags: Collection[str] | None = None) -> Page:
        """At most `limit` plants from the position `after` (from the start when None).

        In ascending id order, except on a Redis Cluster: ascending id within each bucket
        group, group after group. With `tags`, only plants whose tag is one of them. Costs
        O(log n + limit) per tag. ValueError for an `after` this store did not make.
        """
        ...

    def cursor_key(self) -> bytes:
        """The secret that signs page cursors, the same for every process that shares the store."""
        ...

    def __len__(self) -> int: ...

    def ping(self) -> None:
        """Return when the store answers; raise StoreUnavailableError otherwise."""
        ...
