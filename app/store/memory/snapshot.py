"""The memory store written to a file and read back: how a reload hands the plants from the worker
that stops to the worker that replaces it (app/server/handoff.py).

The file is the store's own state, pickled: it is written by this service's own worker into a
directory only the service's user can write (mode 0700), and read once by the next worker, so
nothing else ever feeds it to pickle. It holds secrets in clear (the cursor key, which signs
cursors and watch tickets, and the webhooks' signing secrets, as a Redis store holds them): the
file itself is mode 0600 too, and it is removed once read.

The plants' table and the feed's columns, nearly all of the file, follow the pickled rest in
marshal's form: pickle copies an int each time it is referenced, so a store read back from a
pickle held each id four times over (the names' and tags' keys, the sorted lists), and took about
half as much memory again after a reload as before it; marshal writes an object referenced twice
once, and reads it back as one. The old and the new worker are the same interpreter (the master
forks both), so marshal's form never changes across a reload; a snapshot a stopped master left
unread, read by a start on another Python whose marshal cannot read it, is kept as any snapshot
that cannot be read is (app/server/handoff.py).

A snapshot is written in two steps, so that a full file system is found while the old worker
still serves: `reserve` allocates the space the store needs now (and a margin for the writes
that follow) before the worker is asked to stop; `write` then fills that file, which needs no new
block unless the store outgrew the margin meanwhile. A write that fails removes its file.
"""

from __future__ import annotations

import marshal
import os
import pickle
from array import array
from pathlib import Path
from typing import Any

from sortedcontainers import SortedList

from app.store.memory.store import MemoryPlantStore

#: What a snapshot holds of each part. Not the locks, and not the webhook leases: a lease is held
#: by a thread of the process that stopped, and lapses with it. A snapshot of an earlier version
#: is one pickle, the plants' table (table.py) in it under the names its fields had on the store
#: itself: the snapshot's name of each field, then the table's. It still reads back.
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
#: The form of a snapshot whose table and feed follow in marshal's form (an earlier one has no "form").
FORM = 2
#: Room reserved beyond the store's size now, for the writes the worker answers until it stops.
MARGIN_BYTES = 64 << 10


def _fields(part: object, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(part, name) for name in names}


def _table_state(store: MemoryPlantStore) -> dict[str, Any]:
    """The plants' table as marshal writes it: the sorted lists as lists of the dicts' own ids.
    The sorted ids first: marshal makes each int where it first meets it, so they lie in memory
    in their order, which reading them back into sorted lists walks."""
    table = store._table
    ids_by_tag = {tag: list(tagged) for tag, tagged in table.ids_by_tag.items()}
    return {"ids": list(table.ids), "ids_by_tag": ids_by_tag, "names": table.names, "tags": table.tags,
            "count": table.count}  # fmt: skip


def _table_from(state: dict[str, Any]) -> dict[str, Any]:
    ids_by_tag = {tag: SortedList(tagged) for tag, tagged in state["ids_by_tag"].items()}
    return {**state, "ids": SortedList(state["ids"]), "ids_by_tag": ids_by_tag}


def _feed_from(fields: dict[str, Any]) -> dict[str, Any]:
    """The feed's columns that marshal writes as bytes, back in their own types."""
    return {**fields, "_kinds": bytearray(fields["_kinds"]), "_times": array("q", fields["_times"])}


def _counts_now(counters: Any) -> dict[str, Any]:
    """The counters' pickling state, each of its dicts copied at once (one C call each, under the
    GIL): request threads count on while a reservation pickles it, and a dict that changed size
    mid-pickle would fail the reload."""
    return {
        name: value.copy() if isinstance(value, dict) else value
        for name, value in counters.__getstate__().items()
    }


def dump(store: MemoryPlantStore) -> tuple[bytes, bytes]:
    """The store's state as one consistent cut, in the file's two parts: the pickled rest (the
    cursor key, the webhook endpoints, the rate limits' counters as their storage pickles itself:
    its counts and their windows' ends, without its locks), then the table and the feed."""
    counters = None if store.limit_counters is None else _counts_now(store.limit_counters)
    with store._lock, store.endpoints._lock:
        rest = {
            "form": FORM,
            "store": _fields(store, STORE_FIELDS),
            "endpoints": _fields(store.endpoints, ENDPOINT_FIELDS),
            "limits": counters,
        }
        plants = {"table": _table_state(store), "feed": _fields(store._feed, FEED_FIELDS)}
        return pickle.dumps(rest, protocol=pickle.HIGHEST_PROTOCOL), marshal.dumps(plants)


def _restore_store(store: MemoryPlantStore, fields: dict[str, Any], table: dict[str, Any] | None) -> None:
    """The cursor key and the plants' table: `table` in this form, or else in the fields of an
    earlier version's snapshot."""
    if table is None:
        table = {name: fields.pop(key) for key, name in TABLE_FIELDS.items()}
    vars(store._table).update(table)
    vars(store).update(fields)


def partial_of(path: Path) -> Path:
    return path.with_suffix(".partial")


def _open_partial(path: Path, flags: int) -> int:
    # Its user's alone (0600), whatever the umask: it holds the cursor key and webhook secrets.
    return os.open(partial_of(path), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | flags, 0o600)


def reserve(store: MemoryPlantStore, path: Path) -> int:
    """Allocate the file that `write` will fill: the store's size now, a quarter more and
    MARGIN_BYTES. Raises OSError (ENOSPC, EIO...) with nothing left behind; the bytes reserved."""
    size = sum(map(len, dump(store)))
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
    parts = dump(store)
    try:
        fd = _open_partial(path, 0)
        try:
            for part in parts:
                view = memoryview(part)
                while view:
                    view = view[os.write(fd, view) :]
            os.ftruncate(fd, sum(map(len, parts)))
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
        form = state.get("form")
        if form is not None and form != FORM:
            raise ValueError(f"a snapshot of form {form}, not {FORM}")
        plants = marshal.loads(file.read()) if form else None  # noqa: S302 - the same file
    table, feed = (None, state["feed"]) if plants is None else (_table_from(plants["table"]), plants["feed"])
    with store._lock, store.endpoints._lock:
        _restore_store(store, state["store"], table)
        if plants is not None:
            feed = _feed_from(feed)
        # A feed kept with another retain, or in another form (a snapshot of an earlier version),
        # is carried over as far as it fits in this one (MemoryFeed.carry).
        if feed["retain"] == store._feed.retain and feed.keys() == set(FEED_FIELDS):
            vars(store._feed).update(feed)
        else:
            store._feed.carry(feed)
        vars(store.endpoints).update(state["endpoints"])
        # Only into counters of the same form (the new worker counts here too, with the same
        # `limits`): a snapshot of an earlier version has none, one of a worker without limits None.
        counters, kept = store.limit_counters, state.get("limits")
        if counters is not None and isinstance(kept, dict) and kept.keys() == counters.__getstate__().keys():
            counters.__setstate__(kept)
        return len(store)
