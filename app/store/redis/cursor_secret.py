"""The secret that signs page cursors, kept in Redis beside the plants so every worker shares it."""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from typing import Any

from redis.exceptions import OutOfMemoryError

from app.store.redis.failures import FAILURES

log = logging.getLogger(__name__)

#: How often, at most, a process confirms that Redis still holds the secret it signs with.
CONFIRM_SECONDS = 1.0


class SharedSecret:
    """The random secret at `key`, made by the first process that asks, and kept once read.

    Reading the feed must not depend on Redis taking a write: at its `maxmemory` (noeviction)
    Redis refuses to store a new secret, so this process signs with the one it offered until
    Redis takes it (or another process's is found), asked again at each use meanwhile. Once
    this process's is stored, the cursors it signed in between stay good everywhere; but until
    then the other processes refuse them, and once another's is stored, they are refused
    everywhere. So the start makes the secret while Redis has room (app/server/settings_check.py):
    this process's own is used only when Redis was full before any start made one.

    The secret kept is confirmed in Redis at most once every CONFIRM_SECONDS, after a use, in a
    thread of its own: the use goes on with the secret kept, and never waits on a Redis (or the
    one cluster node that holds the key) that does not answer. A Redis
    that lost its data (restarted without it, FLUSHALL) lost the secret too, while the running
    processes still sign with it: the next process to start (a reload's workers, another host)
    would make another, and refuse every cursor and ticket they signed, those made from `now`
    after the loss's 410 included. So a process that finds it gone puts its own back (SET NX:
    every process that kept it agrees), or takes the one another process put there first."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._offered = secrets.token_bytes(32)
        self._kept: bytes | None = None
        self._confirmed_at = 0.0
        #: The process whose thread is confirming the secret now, if any (a fork's child has none).
        self._confirming: int | None = None
        self._confirming_lock = threading.Lock()  # two threads due at once start one confirmation
        self._warned = False

    def get(self, clients: Any) -> bytes:
        """The shared secret, or while Redis is full and holds none, the one this process offers;
        `clients` is client.py's LazyClient."""
        if self._kept is not None:
            if time.monotonic() - self._confirmed_at >= CONFIRM_SECONDS:
                self._confirm_in_background(clients)
            return self._kept
        try:
            self._kept = _read_or_make(clients.get(), self._key, self._offered)
            self._confirmed_at = time.monotonic()
        except OutOfMemoryError:
            if not self._warned:
                self._warned = True
                log.warning(
                    "Redis is full (maxmemory) and holds no cursor secret yet: this process"
                    " signs cursors with its own until Redis takes it"
                )
            return self._offered
        return self._kept

    def _confirm_in_background(self, clients: Any) -> None:
        with self._confirming_lock:
            if self._confirming == os.getpid():
                return
            self._confirming, self._confirmed_at = os.getpid(), time.monotonic()
        confirming = threading.Thread(target=self._confirm, args=(clients,), name="plants-cursor-secret")
        confirming.daemon = True  # a stopping worker does not wait on a Redis that does not answer
        confirming.start()

    def _confirm(self, clients: Any) -> None:
        """Redis still holds the secret kept; else it gets it back, or another process's is taken.
        A Redis that does not answer, or takes no write now (full, a replica), leaves it as it
        is, confirmed again at a later use: only a secret Redis holds replaces it."""
        try:
            client = clients.get()
            found: bytes | None = client.get(self._key)
            if found is None:
                found = client.set(self._key, self._kept, nx=True, get=True)
        except FAILURES:
            return
        finally:
            self._confirmed_at, self._confirming = time.monotonic(), None
        if found is not None and found != self._kept:
            log.warning(
                "The cursor secret in Redis changed (Redis lost its data): the cursors and watch"
                " tickets this process signed before are refused"
            )
            self._kept = found


def _read_or_make(client: Any, key: str, made: bytes) -> bytes:
    """A read first, so that a read-only replica can serve pages; SET NX GET then answers the key
    another process made meanwhile, or nil when this call made it."""
    found: bytes | None = client.get(key)
    if found is None:
        found = client.set(key, made, nx=True, get=True) or made
    return found
