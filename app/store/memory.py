"""The default store: plants in this process's memory, behind one lock."""

from __future__ import annotations

import sys
import threading

from .base import Outcome, Plant, StoreFullError


class MemoryPlantStore:
    """A thread-safe, bounded, per-process store held in two dicts.

    Names and tags live in separate dicts keyed by id rather than as one record
    object per plant: at a million plants a tuple per plant costs ~20 bytes
    more. Tags repeat, so they are interned and shared.
    """

    shared = False

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.capacity = capacity
        self._names: dict[int, str] = {}
        self._tags: dict[int, str] = {}
        self._lock = threading.Lock()

    def create(self, plant_id: int, name: str, tag: str | None) -> Outcome:
        """Store the plant unless its id is taken; atomic under concurrent callers.

        Raises StoreFullError when the id is new and the store is at capacity.
        """
        with self._lock:
            stored_name = self._names.get(plant_id)
            if stored_name is not None:
                if stored_name == name and self._tags.get(plant_id) == tag:
                    return Outcome.IDENTICAL
                return Outcome.CONFLICT
            if len(self._names) >= self.capacity:
                raise StoreFullError
            self._names[plant_id] = name
            if tag is not None:
                self._tags[plant_id] = sys.intern(tag)
            return Outcome.CREATED

    def get(self, plant_id: int) -> Plant | None:
        with self._lock:
            name = self._names.get(plant_id)
            if name is None:
                return None
            return Plant(name, self._tags.get(plant_id))

    def __len__(self) -> int:
        return len(self._names)

    def ping(self) -> None:
        """Memory always answers."""
