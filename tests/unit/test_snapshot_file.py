"""A reload's snapshot of the memory store (app/store/memory/snapshot.py) holds the plants, the
cursor key (which signs cursors and watch tickets) and the webhooks' signing secrets: the file is
readable by the service's user alone, whatever the umask, not only by its directory's mode."""

from __future__ import annotations

import gc
import os
import pickle
import stat
import tracemalloc

import pytest

from app.server import handoff
from app.store.base import FeedExpiredError
from app.store.memory import snapshot
from app.store.memory.store import MemoryPlantStore
from tests.helpers import small_tmpfs


def test_the_snapshot_is_private_to_its_user_and_reads_back(tmp_path):
    store = MemoryPlantStore(capacity=10, events_retain=10)
    key = store.cursor_key()
    path = tmp_path / "store.snapshot"
    previous = os.umask(0o022)  # the usual default: files readable by every user
    try:
        assert snapshot.write(store, path) == 0
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = MemoryPlantStore(capacity=10, events_retain=10)
    snapshot.read_into(again, path)
    assert again.cursor_key() == key


def large_store() -> MemoryPlantStore:
    """About 100 KB pickled: more than a 64 KiB tmpfs holds."""
    store = MemoryPlantStore(capacity=1000, events_retain=10)
    for plant_id in range(400):
        store.create(plant_id, f"{plant_id:04} " + "F" * 200, None)
    return store


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_a_snapshot_that_does_not_fit_leaves_nothing_half_written(tmp_path):
    store = large_store()
    with small_tmpfs(tmp_path / "small", "64k") as small:
        path = small / "store.snapshot"
        with pytest.raises(OSError, match="No space left"):
            snapshot.reserve(store, path)
        with pytest.raises(OSError, match="No space left"):
            snapshot.write(store, path)
        assert list(small.iterdir()) == []  # no partial file, no snapshot to be read


def test_a_write_fills_its_reservation_and_reads_back_whole(tmp_path):
    store = MemoryPlantStore(capacity=10, events_retain=10)
    store.create(1, "Fern", None)
    path = tmp_path / "store.snapshot"
    reserved = snapshot.reserve(store, path)
    size = sum(map(len, snapshot.dump(store)))
    assert snapshot.partial_of(path).stat().st_size == reserved > size
    assert snapshot.write(store, path) == 1
    assert path.stat().st_size == size  # the reservation's rest given back
    assert not snapshot.partial_of(path).exists()
    again = MemoryPlantStore(capacity=10, events_retain=10)
    assert snapshot.read_into(again, path) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_a_worker_whose_snapshot_does_not_fit_says_so_and_leaves_no_partial_file(tmp_path, caplog):
    """The last step of a reload's handoff (app/server/handoff.py), in the worker that stops."""
    store = large_store()
    with small_tmpfs(tmp_path / "small", "64k") as small:
        handoff._directory = small
        try:
            (small / "handoff-wanted").touch()
            handoff.write_if_wanted(store)
        finally:
            handoff._directory = None
        assert sorted(path.name for path in small.iterdir()) == ["handoff-wanted"]
    (record,) = [record for record in caplog.records if record.levelname == "ERROR"]
    assert "could not be written whole" in record.getMessage()
    assert str(small) in record.getMessage()


def test_the_feed_reads_back_its_events_and_origins_after_wrapping_and_a_snapshot(tmp_path):
    store = MemoryPlantStore(capacity=10, events_retain=3)
    hex_id = "0123456789abcdef0123456789abcdef"
    origins = [hex_id, hex_id.upper(), "req-1 00-trace-01", ""]
    for plant_id, origin in enumerate(origins):
        store.create(plant_id, f"plant {plant_id}", "fern" if plant_id % 2 else None, origin=origin)
    path = tmp_path / "store.snapshot"
    snapshot.write(store, path)
    again = MemoryPlantStore(capacity=10, events_retain=3)
    snapshot.read_into(again, path)
    for read in (store, again):
        entries, _ = read.feed_entries(None, 10)
        assert [entry.origin for entry in entries] == origins[1:]
        assert [(e.event.plant_id, e.event.name, e.event.tag) for e in entries] == [
            (1, "plant 1", "fern"),
            (2, "plant 2", None),
            (3, "plant 3", "fern"),
        ]


def earlier_store_state(store: MemoryPlantStore) -> dict:
    """The store's part of an earlier version's snapshot (one pickle): the table's fields under
    the names they had on the store, its sorted lists pickled whole."""
    table = {key: getattr(store._table, name) for key, name in snapshot.TABLE_FIELDS.items()}
    return {**table, "_cursor_key": store.cursor_key()}


def test_a_feed_snapshotted_in_another_form_keeps_its_count_and_the_plants_read_back(tmp_path):
    store = MemoryPlantStore(capacity=10, events_retain=3)
    store.create(1, "Fern", None)
    state = {
        "store": earlier_store_state(store),
        # The earlier form: a tuple per event.
        "feed": {"retain": 3, "_ring": [(0, 1, "Fern", None, 0)], "_origins": [""], "_last": 1},
        "endpoints": snapshot._fields(store.endpoints, snapshot.ENDPOINT_FIELDS),
    }
    path = tmp_path / "store.snapshot"
    path.write_bytes(pickle.dumps(state))
    again = MemoryPlantStore(capacity=10, events_retain=3)
    assert snapshot.read_into(again, path) == 1
    assert again.get(1) is not None
    # Its events cannot be read back: the position before them is 410, the one after them follows on.
    assert again.feed_entries(None, 10) == ([], (1).to_bytes(8, "big"))
    with pytest.raises(FeedExpiredError):
        again.events((0).to_bytes(8, "big"), 10)
    again.create(2, "Ivy", None)
    assert [event.plant_id for event in again.events((1).to_bytes(8, "big"), 10).events] == [2]


def test_an_earlier_versions_snapshot_reads_back_whole(tmp_path):
    """A reload that upgrades the service: the old worker wrote the earlier form (one pickle)."""
    store = MemoryPlantStore(capacity=10, events_retain=5)
    for plant_id in (3, 1, 2):
        store.create(plant_id, f"plant {plant_id}", "fern" if plant_id != 2 else None)
    state = {
        "store": earlier_store_state(store),
        "feed": snapshot._fields(store._feed, snapshot.FEED_FIELDS),
        "endpoints": snapshot._fields(store.endpoints, snapshot.ENDPOINT_FIELDS),
        "limits": None,
    }
    path = tmp_path / "store.snapshot"
    path.write_bytes(pickle.dumps(state))
    again = MemoryPlantStore(capacity=10, events_retain=5)
    assert snapshot.read_into(again, path) == 3
    assert again.page(None, 10) == store.page(None, 10)
    assert again.page(None, 10, ["fern"]) == store.page(None, 10, ["fern"])
    assert again.feed_entries(None, 10) == store.feed_entries(None, 10)
    assert again.cursor_key() == store.cursor_key()


def test_a_snapshot_of_a_later_form_is_refused_not_read_half(tmp_path):
    path = tmp_path / "store.snapshot"
    path.write_bytes(pickle.dumps({"form": snapshot.FORM + 1}) + b"anything")
    with pytest.raises(ValueError, match="form"):
        snapshot.read_into(MemoryPlantStore(capacity=10), path)


def traced_bytes(make) -> tuple[int, object]:
    """The memory `make()` leaves allocated (tracemalloc), and what it made."""
    gc.collect()
    tracemalloc.start()
    try:
        made = make()
        gc.collect()
        return tracemalloc.get_traced_memory()[0], made
    finally:
        tracemalloc.stop()


def test_a_store_read_back_takes_no_more_memory_than_before_its_reload(tmp_path):
    """pickle copies an int at each reference: a store read back from one held each plant's id
    four times over, about half again as much memory after every reload as before the first."""
    plants = 50_000

    def fill() -> MemoryPlantStore:
        store = MemoryPlantStore(capacity=plants, events_retain=plants)
        for n in range(plants):
            # Ids as a request's JSON makes them: a new int object each.
            store.create(int(str(10**12 + n)), f"Plant {n:07d}", ("fern", "vine", None)[n % 3])
        return store

    before, store = traced_bytes(fill)
    path = tmp_path / "store.snapshot"
    snapshot.write(store, path)
    again = MemoryPlantStore(capacity=plants, events_retain=plants)
    after, _ = traced_bytes(lambda: snapshot.read_into(again, path))
    assert len(again) == plants
    assert again.page(None, 5) == store.page(None, 5)
    assert after < before * 1.1, (after, before)


@pytest.mark.parametrize("retain_after", [2, 3, 4, 8])
def test_a_reload_that_changes_the_retention_keeps_every_position_of_the_feed(tmp_path, retain_after):
    """A follower's cursor from before the reload reads on from the same place, every event
    after it once, or is 410 when the new retention dropped its next event: never a position of
    a feed started again, which silently skipped what came before it."""
    store = MemoryPlantStore(capacity=100, events_retain=3)
    positions = []
    for plant_id in range(5):  # the ring wraps: events 3, 4 and 5 are kept
        positions.append(store.events_now())
        store.create(plant_id, f"plant {plant_id}", None, origin=f"req-{plant_id}")
    ids_before = {entry.event.plant_id: entry.id for entry in store.feed_entries(None, 10)[0]}
    path = tmp_path / "store.snapshot"
    snapshot.write(store, path)
    again = MemoryPlantStore(capacity=100, events_retain=retain_after)
    snapshot.read_into(again, path)
    kept = min(3, retain_after)
    for number, position in enumerate(positions):  # after event 0 (none), 1, 2, 3, 4
        if number < 5 - kept:
            with pytest.raises(FeedExpiredError):
                again.events(position, 100)
            continue
        entries, end = again.feed_entries(position, 100)
        assert [entry.event.plant_id for entry in entries] == [*range(number, 5)]
        assert [entry.origin for entry in entries] == [f"req-{i}" for i in range(number, 5)]
        assert [entry.id for entry in entries] == [ids_before[i] for i in range(number, 5)]
        assert end == again.events_now()
    # The position at the end follows on with the new worker's writes, and the ring goes on.
    end = again.events_now()
    for plant_id in (10, 11):
        again.create(plant_id, "new", None)
    assert [event.plant_id for event in again.events(end, 100).events] == [10, 11]
    for plant_id in range(12, 20):
        again.create(plant_id, "new", None)
    entries, _ = again.feed_entries(None, 100)
    kept_ids = [*range(5 - kept, 5), *range(10, 20)][-retain_after:]
    assert [entry.event.plant_id for entry in entries] == kept_ids


def test_a_reload_that_turns_the_feed_on_again_keeps_no_position_of_before(tmp_path):
    """Writes made while the feed was off (PLANTS_EVENTS_RETAIN=0) are not recorded: a cursor from
    before is 410 once the feed is on again, never followed on past the writes it missed."""
    path = tmp_path / "store.snapshot"
    before = MemoryPlantStore(capacity=10, events_retain=5)
    before.create(1, "Fern", None)
    cursor = before.events_now()
    snapshot.write(before, path)
    off = MemoryPlantStore(capacity=10, events_retain=0)
    snapshot.read_into(off, path)
    off.create(2, "Written while the feed was off", None)
    snapshot.write(off, path)
    on = MemoryPlantStore(capacity=10, events_retain=5)
    snapshot.read_into(on, path)
    on.create(3, "Ivy", None)
    with pytest.raises(FeedExpiredError):
        on.events(cursor, 10)
    assert [event.plant_id for event in on.events(None, 10).events] == [3]
