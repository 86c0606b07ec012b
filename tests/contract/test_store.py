"""Both stores: outcomes, capacity, exact round trips and atomic creates under threads."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.store import CreateOutcome, MemoryPlantStore, Page, Plant, StoreFullError, store_from_url
from app.store.base import id_position
from tests.helpers import walk_pages


@pytest.fixture
def make_store(store_settings):
    stores = []

    def make(capacity: int):
        store = store_from_url(
            store_settings.get("PLANTS_STORE_URL", "memory://"),
            capacity=capacity,
            prefix=store_settings.get("PLANTS_STORE_PREFIX", "plants"),
            connect_timeout=1,
            timeout=1,
        )
        stores.append(store)
        return store

    yield make
    for store in stores:
        getattr(store, "close", lambda: None)()


def test_create_get_len(make_store):
    store = make_store(10)
    assert store.create(1, "Fern", "fern") is CreateOutcome.CREATED
    assert store.create(2, "Cactus", None) is CreateOutcome.CREATED
    assert store.get(1) == Plant("Fern", "fern")
    assert store.get(2) == Plant("Cactus", None)
    assert store.get(3) is None
    assert len(store) == 2


def test_identical_and_conflicting_creates(make_store):
    store = make_store(10)
    store.create(1, "Fern", "fern")
    assert store.create(1, "Fern", "fern") is CreateOutcome.IDENTICAL
    assert store.create(1, "Fern", None) is CreateOutcome.CONFLICT
    assert store.create(1, "Fern", "other") is CreateOutcome.CONFLICT
    assert store.create(1, "Other", "fern") is CreateOutcome.CONFLICT
    assert store.get(1) == Plant("Fern", "fern")
    assert len(store) == 1


def test_capacity_refuses_only_new_ids(make_store):
    store = make_store(1)
    store.create(1, "Fern", None)
    with pytest.raises(StoreFullError):
        store.create(2, "Cactus", None)
    assert store.create(1, "Fern", None) is CreateOutcome.IDENTICAL
    assert len(store) == 1


def test_memory_tags_are_interned():
    store = MemoryPlantStore(capacity=10)
    store.create(1, "a", "".join(["suc", "culent"]))
    store.create(2, "b", "".join(["succ", "ulent"]))
    assert store.get(1).tag is store.get(2).tag


def test_concurrent_creates_of_one_id_have_exactly_one_winner(make_store):
    store = make_store(1000)
    ids = list(range(50))
    barrier = threading.Barrier(8)

    def contender(worker: int) -> list[CreateOutcome]:
        barrier.wait()
        # Workers 0-3 send the same data (winners or replays); 4-7 send their own name (conflicts).
        name = "same" if worker < 4 else f"name-{worker}"
        return [store.create(plant_id, name, None) for plant_id in ids]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(contender, range(8)))
    for index in range(len(ids)):
        outcomes = Counter(result[index] for result in results)
        assert outcomes[CreateOutcome.CREATED] == 1
        assert (
            outcomes[CreateOutcome.CREATED]
            + outcomes[CreateOutcome.IDENTICAL]
            + outcomes[CreateOutcome.CONFLICT]
            == 8
        )
    assert len(store) == len(ids)


@pytest.mark.parametrize(
    ("plant_id", "name", "tag"),
    [
        (-1, "Fern", None),
        (-(2**63), "Min", "t"),
        (2**63 - 1, "Max", None),
        (65536, "same bucket as 0", None),
        (0, "12:3:name with colons and digits", "4:x"),
        (3, "nul \x00 inside", "\x00"),
        (4, "Ünïcödé 🌵", "多肉植物"),
        (5, "x" * 200, "t" * 100),
    ],
)
def test_every_plant_comes_back_exactly(make_store, plant_id, name, tag):
    store = make_store(10)
    assert store.create(plant_id, name, tag) is CreateOutcome.CREATED
    assert store.get(plant_id) == Plant(name, tag)
    assert store.create(plant_id, name, tag) is CreateOutcome.IDENTICAL
    assert store.create(plant_id, name, None if tag else "t") is CreateOutcome.CONFLICT
    assert len(store) == 1


def test_ids_that_share_a_bucket_stay_apart(make_store):
    # 65536 apart: one Redis leaf bucket, and one of the memory store's dict shards.
    store = make_store(10)
    for plant_id in (7, 7 + 65536, 7 - 65536):
        assert store.create(plant_id, f"plant {plant_id}", None) is CreateOutcome.CREATED
    for plant_id in (7, 7 + 65536, 7 - 65536):
        assert store.get(plant_id) == Plant(f"plant {plant_id}")
    assert store.get(7 + 2 * 65536) is None


# Ids from a small range, so that creates and deletes meet, and enough of them for several
# 128-member leaves in Redis (splits, and leaves emptied and removed).
store_operations = st.lists(
    st.tuples(
        st.sampled_from(["create", "delete"]), st.integers(-400, 400), st.sampled_from([None, "fern", "palm"])
    ),
    max_size=600,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    operations=store_operations,
    limit=st.integers(1, 9),
    tags=st.none() | st.sets(st.sampled_from(["fern", "palm", "orchid"]), min_size=1, max_size=2),
)
def test_any_creates_and_deletes_then_a_walk_equals_a_sorted_dict(store_settings, operations, limit, tags):
    settings_ = {**store_settings, "PLANTS_STORE_PREFIX": f"prop-{uuid.uuid4().hex}"}
    store = store_from_url(
        settings_.get("PLANTS_STORE_URL", "memory://"),
        capacity=10_000,
        prefix=settings_["PLANTS_STORE_PREFIX"],
        connect_timeout=1,
        timeout=1,
    )
    model: dict[int, Plant] = {}
    try:
        for operation, plant_id, tag in operations:
            if operation == "create":
                outcome = store.create(plant_id, f"p{plant_id}", tag)
                if plant_id in model:
                    assert outcome is (
                        CreateOutcome.IDENTICAL if model[plant_id].tag == tag else CreateOutcome.CONFLICT
                    )
                else:
                    assert outcome is CreateOutcome.CREATED
                    model[plant_id] = Plant(f"p{plant_id}", tag)
            else:
                assert store.delete(plant_id) is (model.pop(plant_id, None) is not None)
        assert walk_pages(store, limit) == sorted(model.items())
        expected = sorted((key, plant) for key, plant in model.items() if plant.tag in (tags or ()))
        assert walk_pages(store, limit, tags) == (sorted(model.items()) if tags is None else expected)
        assert len(store) == len(model)
    finally:
        getattr(store, "close", lambda: None)()


def test_a_page_starts_after_any_id_present_or_not(make_store):
    store = make_store(100)
    for plant_id in (-5, 0, 5, 10):
        store.create(plant_id, "p", None)
    assert [key for key, _, _ in store.page(id_position(-6), 10).plants] == [-5, 0, 5, 10]
    assert [key for key, _, _ in store.page(id_position(1), 10).plants] == [5, 10]
    assert [key for key, _, _ in store.page(id_position(5), 1).plants] == [10]
    assert store.page(id_position(5), 1).next is None
    assert store.page(id_position(10), 10) == Page([], None)
    assert store.page(None, 2) == Page([(-5, "p", None), (0, "p", None)], id_position(0))


def test_a_delete_frees_capacity_and_reports_absence(make_store):
    store = make_store(2)
    store.create(1, "a", "t")
    store.create(2, "b", None)
    with pytest.raises(StoreFullError):
        store.create(3, "c", None)
    assert store.delete(1) is True
    assert store.delete(1) is False
    assert store.create(3, "c", None) is CreateOutcome.CREATED
    assert len(store) == 2
    assert store.page(None, 10, ["t"]) == Page([], None)


def test_the_cursor_key_is_stable_per_store(make_store):
    store = make_store(10)
    key = store.cursor_key()
    assert len(key) == 32
    assert store.cursor_key() == key
