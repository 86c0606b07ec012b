"""The memory store written to a file and read back: how a reload hands the plants from the worker
that stops to the worker that replaces it (app/server/handoff.py).

The file is the store's own state, pickled: it is written by this service's own worker into a
directory only the service's user can write (mode 0700), and read once by the next worker, so
nothing else ever feeds it to pickle. It holds secrets in clear (the cursor key, which signs
cursors and watch tickets, and the webhooks' signing secrets, as a Redis store holds them): the
file itself is mode 0600 too, and it is removed once read.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

from app.store.memory.store import MemoryPlantStore

#: What a snapshot holds of each part. Not the locks, and not the webhook leases: a lease is held
#: by a thread of the process that stopped, and lapses with it.
STORE_FIELDS = ("_names", "_tags", "_count", "_ids", "_ids_by_tag", "_cursor_key")
FEED_FIELDS = ("retain", "_ring", "_origins", "_before", "_last", "_epoch")
ENDPOINT_FIELDS = ("_fields", "_attempts")


def _fields(part: object, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(part, name) for name in names}


def write(store: MemoryPlantStore, path: Path) -> int:
    """Write the store to `path` (atomically: a reader sees the whole file or none); its plants' count."""
    with store._lock, store.endpoints._lock:
        state = {
            "store": _fields(store, STORE_FIELDS),
            "feed": _fields(store._feed, FEED_FIELDS),
            "endpoints": _fields(store.endpoints, ENDPOINT_FIELDS),
        }
        partial = path.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        # Its user's alone (0600), whatever the umask: it holds the cursor key and webhook secrets.
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file:
            pickle.dump(state, file, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)
        return store._count


def read_into(store: MemoryPlantStore, path: Path) -> int:
    """Load the snapshot at `path` into an empty `store`; its plants' count.

    The store keeps its own capacity (the reload may have changed PLANTS_MAX_PLANTS). The feed
    comes back only when PLANTS_EVENTS_RETAIN is unchanged, since an event's place in the ring
    depends on it; otherwise the feed starts again with a new epoch, and a reader starts again
    from its first page.
    """
    with path.open("rb") as file:
        state = pickle.load(file)  # noqa: S301 - our own worker's file, in a 0700 directory
    with store._lock, store.endpoints._lock:
        vars(store).update(state["store"])
        if state["feed"]["retain"] == store._feed.retain:
            feed = state["feed"]
            # A snapshot of a version that kept no tag before: each event's own tag.
            feed.setdefault("_before", [event[3] for event in feed["_ring"]])
            vars(store._feed).update(feed)
        vars(store.endpoints).update(state["endpoints"])
        return store._count
