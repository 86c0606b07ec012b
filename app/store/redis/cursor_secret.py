"""The secret that signs page cursors, kept in Redis beside the plants so every worker shares it."""

from __future__ import annotations

import secrets
from typing import Any


def shared_secret(client: Any, key: str) -> bytes:
    """The random secret at `key`, made by the first process that asks.

    A read first, so that a read-only replica can serve pages; SET NX GET then answers the key
    another process made meanwhile, or nil when this call made it."""
    found: bytes | None = client.get(key)
    if found is None:
        made = secrets.token_bytes(32)
        found = client.set(key, made, nx=True, get=True) or made
    return found
