"""The memory store written to a file and read back: how a reload hands the plants from the worker
that stops to the worker that replaces it (app/server/handoff.py).

The file is the store's own state, pickled: it is written by this service's own worker into a
directory only the service's user can write (mode 0700), and read once by the next worker, so
nothing else ever feeds it to pickle. It holds secrets in clear (the cursor key, which signs
cursors and watch tickets, and the webhooks' signing secrets, as a Redis store holds them): the
file itself is mode 0600 too, and it is removed once read.

A snapshot is written in two steps, so that a full file system is found while the old worker
still serves: `reserve` allocates the space the store needs now (and a margin for the writes
that follow) before the worker is asked to stop; `write` then fills that file, which needs no new
block unless the store outgrew the margin meanwhile. A write that fails removes its file.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

from app.store.memory.store import MemoryPlantStore

#: What a snapshot holds of each part. Not the locks, and not the webhook leases: a lease is held
#: by a thread of the process that stopped, and lapses with it. The plants' table (table.py) is
#: kept under the names its fields had on the store itself, so the file has one form across
#: versions: the snapshot's name of each field, then the table's.
TABLE_FIELDS = {
    "_names": "names",
    "_tags": "tags",
    "_count": "count",
    "_ids": "ids",
    "_ids_by_tag": "ids_by_tag",
}
STORE_FIELDS = ("_cursor_key",)
FEED_FIELDS = (
    "retain", "_kinds", "_plants", "_names", "_tags", "_times", "_origins", "_before", "_last", "_epoch",
    "_offset",
)  # fmt: skip
ENDPOINT_FIELDS = ("_fields", "_attempts")
#: Room reserved beyond the store's size now, for the writes the worker answers until it stops.
MARGIN_BYTES = 64 << 10


def _fields(part: object, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(part, name) for name in names}


def store_state(store: MemoryPlantStore) -> dict[str, Any]:
    """The store's own part of a snapshot: its plants' table and its cursor key."""
    table = {key: getattr(store._table, name) for key, name in TABLE_FIELDS.items()}
    return {**table, **_fields(store, STORE_FIELDS)}


def _counts_now(counters: Any) -> dict[str, Any]:
    """The counters' pickling state, each of its dicts copied at once (one C call each, under the
    GIL): request threads count on while a reservation pickles it, and a dict that changed size
    mid-pickle would fail the reload."""
    return {
        name: value.copy() if isinstance(value, dict) else value
        for name, value in counters.__getstate__().items()
    }


def dump(store: MemoryPlantStore) -> bytes:
    """The store's state, pickled, as one consistent cut; the rate limits' counters with it, as
    their storage pickles itself (its counts and their windows' ends, without its locks)."""
    counters = None if store.limit_counters is None else _counts_now(store.limit_counters)
    with store._lock, store.endpoints._lock:
        state = {
            "store": store_state(store),
            "feed": _fields(store._feed, FEED_FIELDS),
            "endpoints": _fields(store.endpoints, ENDPOINT_FIELDS),
            "limits": counters,
        }
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def _restore_store(store: MemoryPlantStore, fields: dict[str, Any]) -> None:
    table = vars(store._table)
    for key, value in fields.items():
        if key in TABLE_FIELDS:
            table[TABLE_FIELDS[key]] = value
        else:
            vars(store)[key] = value


def partial_of(path: Path) -> Path:
    return path.with_suffix(".partial")


def _open_partial(path: Path, flags: int) -> int:
    # Its user's alone (0600), whatever the umask: it holds the cursor key and webhook secrets.
    return os.open(partial_of(path), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | flags, 0o600)


def reserve(store: MemoryPlantStore, path: Path) -> int:
    """Allocate the file that `write` will fill: the store's size now, a quarter more and
    MARGIN_BYTES. Raises OSError (ENOSPC, EIO...) with nothing left behind; the bytes reserved."""
    size = len(dump(store))
    size += size // 4 + MARGIN_BYTES
    partial = partial_of(path)
    partial.unlink(missing_ok=True)
    fd = _open_partial(path, os.O_EXCL)
    try:
        os.posix_fallocate(fd, 0, size)  # ENOSPC now, not at the write
    except OSError:
        partial.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)
    return size


def write(store: MemoryPlantStore, path: Path) -> int:
    """Write the store to `path` (atomically: a reader sees the whole file or none), into the
    space `reserve` allocated if it did; its plants' count. Raises OSError having removed the
    partial file: no half snapshot is ever left to be read."""
    data = dump(store)
    try:
        fd = _open_partial(path, 0)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial_of(path), path)
    except OSError:
        partial_of(path).unlink(missing_ok=True)
        raise
    return len(store)


def read_into(store: MemoryPlantStore, path: Path) -> int:
    """Load the snapshot at `path` into an empty `store`; its plants' count.

    The store keeps its own capacity (the reload may have changed PLANTS_MAX_PLANTS). The feed
    comes back whole when PLANTS_EVENTS_RETAIN is unchanged and this version wrote it (its
    fields); otherwise its latest events that fit come back under their numbers, so that every
    position read before the reload still means the same place: the events after it, or 410.
    """
    with path.open("rb") as file:
        state = pickle.load(file)  # noqa: S301 - our own worker's file, in a 0700 directory
    with store._lock, store.endpoints._lock:
        _restore_store(store, state["store"])
        # A feed kept with another retain, or in another form (a snapshot of an earlier version),
        # is carried over as far as it fits in this one (MemoryFeed.carry).
        if state["feed"]["retain"] == store._feed.retain and state["feed"].keys() == set(FEED_FIELDS):
            vars(store._feed).update(state["feed"])
        else:
            store._feed.carry(state["feed"])
        vars(store.endpoints).update(state["endpoints"])
        # Only into counters of the same form (the new worker counts here too, with the same
        # `limits`): a snapshot of an earlier version has none, one of a worker without limits None.
        counters, kept = store.limit_counters, state.get("limits")
        if counters is not None and isinstance(kept, dict) and kept.keys() == counters.__getstate__().keys():
            counters.__setstate__(kept)
        return len(store)
