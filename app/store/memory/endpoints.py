"""The memory store's webhook endpoints: their fields and attempts in dicts, behind one lock.

The same rules as the Redis scripts (app/store/endpoints.py); leases matter only between the
threads of this process.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from app.store.endpoints import ATTEMPTS_KEPT, ENABLED, Acked, Endpoint, outcome_as_read


class MemoryEndpoints:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fields: dict[str, dict[str, str]] = {}
        self._attempts: dict[str, deque[str]] = {}
        self._leases: dict[str, tuple[str, float]] = {}

    def add(self, endpoint: Endpoint, limit: int) -> bool:
        with self._lock:
            if len(self._fields) >= limit:
                return False
            self._fields[endpoint.id] = endpoint.fields()
            self._attempts[endpoint.id] = deque(maxlen=ATTEMPTS_KEPT)
            return True

    def get(self, endpoint_id: str, until: float | None = None) -> Endpoint | None:
        with self._lock:
            fields = self._fields.get(endpoint_id)
            return None if fields is None else Endpoint.from_fields(endpoint_id, dict(fields))

    def all(self) -> list[Endpoint]:
        with self._lock:  # a dict keeps the order in which they were added
            return [Endpoint.from_fields(key, dict(fields)) for key, fields in self._fields.items()]

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._fields)

    def update(self, read: Endpoint, fields: dict[str, str], *, overriding: bool = False) -> bool | None:
        unchanged = outcome_as_read(read, fields, overriding)
        with self._lock:
            kept = self._fields.get(read.id)
            if kept is None:
                return None
            if kept["rev"] != str(read.rev) or any(kept[name] != text for name, text in unchanged.items()):
                return False
            kept.update(fields)
            kept["rev"] = str(read.rev + 1)
            return True

    def remove(self, endpoint_id: str) -> bool:
        with self._lock:
            self._attempts.pop(endpoint_id, None)
            self._leases.pop(endpoint_id, None)
            return self._fields.pop(endpoint_id, None) is not None

    def attempts(self, endpoint_id: str) -> list[str]:
        with self._lock:
            return list(self._attempts.get(endpoint_id, ()))

    def _holds(self, endpoint_id: str, owner: str, now: float) -> bool:
        holder = self._leases.get(endpoint_id)
        return holder is not None and holder[0] == owner and holder[1] > now

    def lease(self, endpoint_id: str, owner: str, ttl_ms: int) -> Endpoint | None:
        now = time.monotonic()
        with self._lock:
            fields = self._fields.get(endpoint_id)
            holder = self._leases.get(endpoint_id)
            if fields is None or (holder is not None and holder[0] != owner and holder[1] > now):
                return None
            self._leases[endpoint_id] = (owner, now + ttl_ms / 1000)
            return Endpoint.from_fields(endpoint_id, dict(fields))

    def renew(self, endpoint_ids: list[str], owner: str, ttl_ms: int) -> list[bool]:
        now = time.monotonic()
        held = []
        with self._lock:
            for endpoint_id in endpoint_ids:
                holds = self._holds(endpoint_id, owner, now)
                if holds:
                    self._leases[endpoint_id] = (owner, now + ttl_ms / 1000)
                held.append(holds)
        return held

    def release(self, endpoint_id: str, owner: str) -> None:
        with self._lock:
            if self._holds(endpoint_id, owner, time.monotonic()):
                del self._leases[endpoint_id]

    def ack(
        self,
        endpoint_id: str,
        owner: str,
        ttl_ms: int,
        epoch: int,
        fields: dict[str, str],
        attempt: str | None,
        rev: int | None = None,
    ) -> Acked | None:
        now = time.monotonic()
        with self._lock:
            kept = self._fields.get(endpoint_id)
            if kept is None or not self._holds(endpoint_id, owner, now) or kept["epoch"] != str(epoch):
                return None
            self._leases[endpoint_id] = (owner, now + ttl_ms / 1000)
            if rev is not None and kept["rev"] != str(rev):
                return Acked(kept["status"], int(kept["rev"]), stored=False)
            enabled = kept["status"] == ENABLED
            kept.update(
                (key, value) for key, value in fields.items() if enabled or key not in ("status", "reason")
            )
            if attempt is not None:
                self._attempts[endpoint_id].appendleft(attempt)
            return Acked(kept["status"], int(kept["rev"]), stored=True)
