"""One attempt to deliver an event, as a drain makes it (drain.py): its request carries the request
id and the trace context of the write that made the event, it is traced when this process traces,
and it is timed in its endpoint's lane (lanes.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from app.settings import Settings
from app.store import FeedEntry, PlantStore, StoreUnavailableError
from app.store.endpoints import ENABLED, Endpoint
from app.telemetry import tracing
from app.webhooks.keepalive import Slot
from app.webhooks.lanes import Lanes
from app.webhooks.message import origin_of
from app.webhooks.sender import Attempt, Watchdog, send

if TYPE_CHECKING:
    from app.metrics import Metrics


class Delivering(Protocol):
    """What a drain reads of the deliverer that runs it."""

    store: PlantStore
    settings: Settings
    user_agent: str
    owner: str
    watchdog: Watchdog
    lanes: Lanes
    tracer: Any
    metrics: Metrics | None
    cutting_off: bool

    @property
    def stopping(self) -> bool: ...


def attempt_event(
    deliverer: Delivering,
    endpoint: Endpoint,
    slot: Slot | None,
    entry: FeedEntry,
    msg_id: str,
    body: bytes,
    headers: dict[str, str],
) -> tuple[Attempt, bool]:
    """One attempt, with the request id (outside the signed content) and the trace context of
    the write that made the event: the attempt's own span's, when this process traces, else
    the write's as stored. Its outcome, and whether it was slow (lanes.py)."""
    settings = deliverer.settings
    request_id, traceparent = origin_of(entry)
    if request_id is not None:
        headers["X-Request-Id"] = request_id

    def attempt(extra: dict[str, str]) -> Attempt:
        return send(
            endpoint.url,
            body,
            {**headers, **extra},
            timeout=settings.webhooks_timeout,
            allowed=settings.webhooks_allow_hosts,
            watchdog=deliverer.watchdog,
            slot=slot,
            still_wanted=lambda until: still_enabled(deliverer.store, endpoint, until),
        )

    deliverer.lanes.begin(endpoint.id)
    try:
        if deliverer.tracer is None:
            outcome = attempt({"traceparent": traceparent} if traceparent is not None else {})
        else:
            attributes = {"webhook.id": msg_id, "webhook.endpoint": endpoint.id}
            outcome = tracing.traced_attempt(deliverer.tracer, traceparent, attributes, attempt)
    finally:
        slow = deliverer.lanes.end(endpoint.id)
    return outcome, slow


def still_enabled(store: PlantStore, endpoint: Endpoint, until: float | None = None) -> bool:
    """Whether `endpoint` is as its drain leased it, and enabled: read again before writing an
    attempt that took long to connect, so that an endpoint deleted or disabled meanwhile (its
    answer already given) gets nothing more. The read ends by `until`, the attempt's deadline."""
    try:
        fresh = store.endpoints.get(endpoint.id, until=until)
    except StoreUnavailableError:
        return True  # at least once: a store that does not answer withdraws nothing
    return fresh is not None and fresh.epoch == endpoint.epoch and fresh.status == ENABLED
