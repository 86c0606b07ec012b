"""A reload's snapshot of the memory store (app/store/memory/snapshot.py) holds the plants, the
cursor key (which signs cursors and watch tickets) and the webhooks' signing secrets: the file is
readable by the service's user alone, whatever the umask, not only by its directory's mode."""

from __future__ import annotations

import os
import stat

from app.store.memory import snapshot
from app.store.memory.store import MemoryPlantStore


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
