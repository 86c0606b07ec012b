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
    """Up to `limit` plants in ascending id order, and whether more may follow the last."""

    plants: list[StoredPlant]
    more: bool


class StoreFullError(Exception):
    """The store holds its capacity of plants (or its server its memory) and cannot take a new one."""


class StoreUnavailableError(Exception):
    """The store did not answer in time, or cannot write now; the request may be retried.

    `reason` is one of `timeout`, `connection`, `read_only`, `needs_migration` or `other`. The
    message names what failed, for the log; it never contains a password.
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

    def page(self, after: int | None, limit: int, tags: Collection[str] | None = None) -> Page:
        """The plants with ids above `after` (all when None) in ascending id order, at most `limit`.

        With `tags`, only plants whose tag is one of them. Costs O(log n + limit) per tag.
        """
        ...

    def cursor_key(self) -> bytes:
        """The secret that signs page cursors, the same for every process that shares the store."""
        ...

    def __len__(self) -> int: ...

    def ping(self) -> None:
        """Return when the store answers; raise StoreUnavailableError otherwise."""
        ...
