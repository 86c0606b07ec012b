"""The secret that signs page cursors, kept in Redis beside the plants so every worker shares it."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from redis.exceptions import OutOfMemoryError

log = logging.getLogger(__name__)


class SharedSecret:
    """The random secret at `key`, made by the first process that asks, and kept once read.

    Reading the feed must not depend on Redis taking a write: at its `maxmemory` (noeviction)
    Redis refuses to store a new secret, so this process signs with the one it offered until
    Redis takes it (or another process's is found), asked again at each use meanwhile. Once
    this process's is stored, the cursors it signed in between stay good everywhere; but until
    then the other processes refuse them, and once another's is stored, they are refused
    everywhere. So the start makes the secret while Redis has room (app/server/settings_check.py):
    this process's own is used only when Redis was full before any start made one."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._offered = secrets.token_bytes(32)
        self._kept: bytes | None = None
        self._warned = False

    def get(self, clients: Any) -> bytes:
        """The shared secret, or while Redis is full and holds none, the one this process offers;
        `clients` (client.py's LazyClient) is asked for a client only until one is kept."""
        if self._kept is None:
            try:
                self._kept = _read_or_make(clients.get(), self._key, self._offered)
            except OutOfMemoryError:
                if not self._warned:
                    self._warned = True
                    log.warning(
                        "Redis is full (maxmemory) and holds no cursor secret yet: this process"
                        " signs cursors with its own until Redis takes it"
                    )
                return self._offered
        return self._kept


def _read_or_make(client: Any, key: str, made: bytes) -> bytes:
    """A read first, so that a read-only replica can serve pages; SET NX GET then answers the key
    another process made meanwhile, or nil when this call made it."""
    found: bytes | None = client.get(key)
    if found is None:
        found = client.set(key, made, nx=True, get=True) or made
    return found
