"""A reload's snapshot of the memory store (app/store/memory/snapshot.py) holds the plants, the
cursor key (which signs cursors and watch tickets) and the webhooks' signing secrets: the file is
readable by the service's user alone, whatever the umask, not only by its directory's mode."""

from __future__ import annotations

import os
import stat

import pytest

from app.server import handoff
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
    assert snapshot.partial_of(path).stat().st_size == reserved > len(snapshot.dump(store))
    assert snapshot.write(store, path) == 1
    assert path.stat().st_size == len(snapshot.dump(store))  # the reservation's rest given back
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
