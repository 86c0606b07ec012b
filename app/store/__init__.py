"""Plant stores: the interface, the backends, and the one chosen by URL.

`memory://` (the default) is `MemoryPlantStore`, in this process. `redis://`, `rediss://` (TLS),
`unix://`, and for a Redis Cluster `redis+cluster://` and `rediss+cluster://` (the `limits`
library's notation) are `RedisPlantStore`, shared by every process that uses the same Redis and
prefix.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from .base import (
    ANY_PLANT,
    CREATED_EVENT,
    DELETED_EVENT,
    EVENT_TYPES,
    KEEP,
    UNCONDITIONAL,
    UPDATED_EVENT,
    Change,
    Event,
    EventPage,
    FeedExpiredError,
    Outcome,
    Page,
    Plant,
    PlantStore,
    Precondition,
    PreconditionFailedError,
    StoreFullError,
    StoreUnavailableError,
    plant_etag,
)
from .memory import MemoryPlantStore
from .redis import RedisPlantStore
from .redis_connection import CLUSTER_SCHEMES, cluster_nodes, url_scheme

__all__ = [
    "ANY_PLANT",
    "CREATED_EVENT",
    "DELETED_EVENT",
    "EVENT_TYPES",
    "KEEP",
    "UNCONDITIONAL",
    "UPDATED_EVENT",
    "Change",
    "Event",
    "EventPage",
    "FeedExpiredError",
    "MemoryPlantStore",
    "Outcome",
    "Page",
    "Plant",
    "PlantStore",
    "Precondition",
    "PreconditionFailedError",
    "StoreFullError",
    "StoreUnavailableError",
    "plant_etag",
    "store_from_url",
]

SCHEMES = ("memory", "redis", "rediss", "unix", *CLUSTER_SCHEMES)


def check_url(url: str) -> str:
    """The URL's scheme, or ValueError saying what is wrong. The message never quotes the URL,
    which can hold a password."""
    scheme = url_scheme(url)
    if scheme in CLUSTER_SCHEMES:
        cluster_nodes(url)  # ValueError saying what is wrong
        return scheme
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError when it is not a number in range
    except ValueError:
        raise ValueError("is not a valid URL (check the port)") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        shown = f"{scheme!r}" if scheme.isalnum() else "missing or invalid"
        raise ValueError(
            f"has scheme {shown}; use memory://, redis://, rediss://, unix:// or redis+cluster://"
        )
    if scheme in ("redis", "rediss") and not parts.hostname:
        raise ValueError(f"names no host: use {scheme}://[user:password@]host:port/db")
    if scheme == "unix" and not parts.path:
        raise ValueError("names no socket: use unix:///path/to/redis.sock")
    if scheme == "memory" and (parts.netloc or parts.path or port):
        raise ValueError("must be just memory://")
    db = parts.path.strip("/") if scheme != "unix" else ""
    if db and not db.isdigit():
        raise ValueError("names a database that is not a number: use /0 to /15")
    return scheme


def store_from_url(
    url: str,
    *,
    capacity: int,
    prefix: str,
    connect_timeout: float,
    timeout: float,
    min_replicas: int = 0,
    events_retain: int = 0,
) -> PlantStore:
    """The store `url` names. Raises ValueError (without quoting the URL) when it names none."""
    if check_url(url) == "memory":
        if min_replicas:
            raise ValueError("names the memory store, which has no replicas for PLANTS_STORE_MIN_REPLICAS")
        return MemoryPlantStore(capacity, events_retain)
    return RedisPlantStore(
        url,
        capacity=capacity,
        prefix=prefix,
        connect_timeout=connect_timeout,
        timeout=timeout,
        min_replicas=min_replicas,
        events_retain=events_retain,
    )
