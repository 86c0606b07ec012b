"""The in-memory store: outcomes, capacity and atomic creates under threads."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.store import MemoryPlantStore, Outcome, Plant, StoreFullError


def test_create_get_len():
    store = MemoryPlantStore(capacity=10)
    assert store.create(1, "Fern", "fern") is Outcome.CREATED
    assert store.create(2, "Cactus", None) is Outcome.CREATED
    assert store.get(1) == Plant("Fern", "fern")
    assert store.get(2) == Plant("Cactus", None)
    assert store.get(3) is None
    assert len(store) == 2


def test_identical_and_conflicting_creates():
    store = MemoryPlantStore(capacity=10)
    store.create(1, "Fern", "fern")
    assert store.create(1, "Fern", "fern") is Outcome.IDENTICAL
    assert store.create(1, "Fern", None) is Outcome.CONFLICT
    assert store.create(1, "Fern", "other") is Outcome.CONFLICT
    assert store.create(1, "Other", "fern") is Outcome.CONFLICT
    assert store.get(1) == Plant("Fern", "fern")
    assert len(store) == 1


def test_capacity_refuses_only_new_ids():
    store = MemoryPlantStore(capacity=1)
    store.create(1, "Fern", None)
    with pytest.raises(StoreFullError):
        store.create(2, "Cactus", None)
    assert store.create(1, "Fern", None) is Outcome.IDENTICAL
    assert len(store) == 1


def test_tags_are_interned():
    store = MemoryPlantStore(capacity=10)
    store.create(1, "a", "".join(["suc", "culent"]))
    store.create(2, "b", "".join(["succ", "ulent"]))
    assert store.get(1).tag is store.get(2).tag


def test_concurrent_creates_of_one_id_have_exactly_one_winner():
    store = MemoryPlantStore(capacity=1000)
    ids = list(range(50))
    barrier = threading.Barrier(8)

    def contender(worker: int) -> list[Outcome]:
        barrier.wait()
        # Workers 0-3 send the same data (winners or replays); 4-7 send their own name (conflicts).
        name = "same" if worker < 4 else f"name-{worker}"
        return [store.create(plant_id, name, None) for plant_id in ids]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(contender, range(8)))
    for index in range(len(ids)):
        outcomes = Counter(result[index] for result in results)
        assert outcomes[Outcome.CREATED] == 1
        assert outcomes[Outcome.CREATED] + outcomes[Outcome.IDENTICAL] + outcomes[Outcome.CONFLICT] == 8
    assert len(store) == len(ids)
