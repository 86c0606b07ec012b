"""Reading a cluster's slot map again when a node stops answering, from another node."""

from __future__ import annotations

import contextlib
import threading
import time

from redis.cluster import RedisCluster

from app.compat.redis import reread_slot_map
from app.store.redis.errors import FAILURES

#: The least time between two reads of the map on a timeout: a cut-off primary makes every
#: request for its slots time out, and one read a second finds its promoted replica soon enough.
REFRESH_INTERVAL_S = 1.0


class SlotMapRefresh:
    def __init__(self, interval_s: float = REFRESH_INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._last = float("-inf")

    def refresh(self, client: RedisCluster, suspect: str | None) -> bool:
        """Read the map again (CLUSTER SLOTS) from any node but `suspect` (a node name), which is
        asked last (app/compat/redis.py); whether it was read. Not when another thread is reading
        it, nor within the interval of the last read: a request thread waits for no one here."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if time.monotonic() - self._last < self._interval_s:
                return False
            self._last = time.monotonic()
            # A failure leaves the old map, to be read again at the next timeout.
            with contextlib.suppress(*FAILURES):
                return reread_slot_map(client, suspect)
            return True
        finally:
            self._lock.release()
