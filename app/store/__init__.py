"""Plant stores: the interface (base.py), one class per backend, and the one a URL names.

As in the `limits` library's `storage` package, each backend class lists the URL schemes it
serves (`SCHEMES`), and `store_from_url` picks it: `memory://` (the default) is
`MemoryPlantStore`, in this process; `redis://`, `rediss://` (TLS), `unix://`, and for a Redis
Cluster `redis+cluster://` and `rediss+cluster://` are `RedisPlantStore`, shared by every
process that uses the same Redis and prefix. The store never imports Flask.
"""

from __future__ import annotations

from typing import Any

from app.settings import ConfigurationError, Settings
from app.store.base import (
    ANY_PLANT,
    CREATED_EVENT,
    DELETED_EVENT,
    EVENT_TYPES,
    KEEP,
    UNCONDITIONAL,
    UPDATED_EVENT,
    Change,
    CreateOutcome,
    Event,
    EventPage,
    FeedEntry,
    FeedExpiredError,
    Page,
    Plant,
    PlantStore,
    Precondition,
    PreconditionFailedError,
    StoreFullError,
    StoreUnavailableError,
    plant_etag,
)
from app.store.memory.store import MemoryPlantStore
from app.store.readiness import FailingNode, Readiness
from app.store.redis.failures import FAILURES, translate
from app.store.redis.renewal import RenewingPool, renewed_after_read_only
from app.store.redis.store import RedisPlantStore
from app.store.url import StoreUrl

__all__ = [
    "ANY_PLANT",
    "CREATED_EVENT",
    "DELETED_EVENT",
    "EVENT_TYPES",
    "FAILURES",
    "KEEP",
    "UNCONDITIONAL",
    "UPDATED_EVENT",
    "Change",
    "CreateOutcome",
    "Event",
    "EventPage",
    "FailingNode",
    "FeedEntry",
    "FeedExpiredError",
    "MemoryPlantStore",
    "Page",
    "Plant",
    "PlantStore",
    "Precondition",
    "PreconditionFailedError",
    "Readiness",
    "RedisPlantStore",
    "RenewingPool",
    "StoreFullError",
    "StoreUnavailableError",
    "StoreUrl",
    "backend_error",
    "plant_etag",
    "renewed_after_read_only",
    "store_for",
    "store_from_url",
]

#: The backend of each URL scheme.
BACKENDS: dict[str, Any] = {
    scheme: backend for backend in (MemoryPlantStore, RedisPlantStore) for scheme in backend.SCHEMES
}


def store_from_url(
    url: str | StoreUrl,
    *,
    capacity: int,
    prefix: str,
    connect_timeout: float,
    timeout: float,
    min_replicas: int = 0,
    events_retain: int = 0,
) -> PlantStore:
    """The store `url` names. Raises ValueError (without quoting the URL) when it names none."""
    if isinstance(url, str):
        url = StoreUrl.parse(url)
    return BACKENDS[url.scheme].from_url(
        url,
        capacity=capacity,
        prefix=prefix,
        connect_timeout=connect_timeout,
        timeout=timeout,
        min_replicas=min_replicas,
        events_retain=events_retain,
    )


def store_for(settings: Settings) -> tuple[StoreUrl, PlantStore]:
    """The settings' store URL, parsed, and the store it names, sized and timed by the settings.
    Raises ConfigurationError, naming the store's setting but never quoting its URL, when the URL
    names no store."""
    try:
        url = StoreUrl.parse(settings.store_url)
        return url, store_from_url(
            url,
            capacity=settings.max_plants,
            prefix=settings.store_prefix,
            connect_timeout=settings.store_connect_timeout,
            timeout=settings.store_timeout,
            min_replicas=settings.store_min_replicas,
            events_retain=settings.events_retain,
        )
    except ValueError as exc:
        raise ConfigurationError(settings.store_url_key, str(exc)) from None


def backend_error(exc: BaseException | None, user: str) -> StoreFullError | StoreUnavailableError:
    """A backend's error met by another `user` of the store's server (the rate limits' `limits`
    storage on the same Redis), as the store's own: the same 503 and log line, or StoreFullError
    when Redis refused a write at its `maxmemory`."""
    if isinstance(exc, FAILURES):
        return translate(exc)
    return StoreUnavailableError("other", user)
