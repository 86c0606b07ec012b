"""Reading a cluster's slot map again when a node stops answering, from another node, in the
background: a request thread never waits for a read of the map (the 503 of a write that timed out
leaves at once), and while writes time out on a node, the map is read every `every_s`, so that a
promoted replica is followed within that of the surviving nodes showing it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from redis.cluster import RedisCluster

from app.compat.redis import reread_slot_map
from app.store.redis.failures import FAILURES

#: How often the map is read while a node is suspect: a surviving node shows a promoted replica
#: (CLUSTER SLOTS) at once, and the service sends to it from the next read on.
EVERY_S = 0.25
#: How long after a node's last failure its slots are watched: each further timeout on it (one a
#: write's timeout apart while it is cut off) watches on.
WATCH_S = 3.0


class SlotMapRefresh:
    """One cluster client's reads of its slot map, in one background thread at a time."""

    def __init__(self, every_s: float = EVERY_S, watch_s: float = WATCH_S) -> None:
        self._every_s = every_s
        self._watch_s = watch_s
        self._changed = threading.Condition()
        self._reads = 0  # reads done, for `wait_for_read`
        self._until = float("-inf")  # the watch ends then
        self._suspect: str | None = None
        self._running = False

    def refresh(self, client: RedisCluster, suspect: str | None, on_read: Callable[[], None]) -> int:
        """Read the map again (CLUSTER SLOTS) from any node but `suspect` (a node name), which is
        asked last (app/compat/redis.py), and again every `every_s` while `suspect` still serves
        slots, for `watch_s`; `on_read` after each read. Returns at once: the number of reads done
        so far, for `wait_for_read`."""
        with self._changed:
            self._until = time.monotonic() + self._watch_s
            self._suspect = suspect
            reads = self._reads
            if self._running:
                return reads
            self._running = True
        threading.Thread(target=self._watch, args=(client, on_read), daemon=True).start()
        return reads

    def wait_for_read(self, after: int, timeout: float) -> bool:
        """Whether a read started after `after` reads (refresh's answer) ended within `timeout`."""
        with self._changed:
            return self._changed.wait_for(lambda: self._reads > after, timeout)

    def _watch(self, client: RedisCluster, on_read: Callable[[], None]) -> None:
        watching = True
        try:
            while watching:
                with self._changed:
                    suspect = self._suspect
                read = False
                # A failure leaves the old map, to be read again at the next turn.
                with contextlib.suppress(*FAILURES):
                    read = reread_slot_map(client, suspect)
                    on_read()
                # Watched on while the suspect still serves slots (its replica not yet promoted).
                watching = read and time.monotonic() < self._until and _serves(client, suspect)
                with self._changed:
                    self._reads += 1
                    self._changed.notify_all()
                if watching:
                    time.sleep(self._every_s)
        finally:
            with self._changed:
                self._running = False


def _serves(client: RedisCluster, node: str | None) -> bool:
    """Whether `node` is a primary by the map: one to keep watching."""
    if node is None:
        return False
    with contextlib.suppress(*FAILURES):
        return any(primary.name == node for primary in client.get_primaries())
    return False
