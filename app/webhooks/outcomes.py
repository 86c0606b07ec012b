"""An attempt's outcome, as its endpoint keeps it and as the metrics count it: the attempt's
record (the endpoint's `last_attempt`), what a failed attempt leaves the endpoint (a retry on the
schedule, or disabled, or failing), and the attempts' metrics."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from app.store.endpoints import DISABLED, FAILING, delivery_fields
from app.webhooks.message import ATTEMPTS, retry_delay, utc_text
from app.webhooks.sender import Attempt

if TYPE_CHECKING:
    from app.metrics import Metrics


def epoch_ms() -> int:
    return time.time_ns() // 1_000_000


def attempt_record(msg_id: str | None, status: int | None, error: str | None, duration_ms: int) -> str:
    """An attempt as the endpoint keeps it (its `last_attempt`), timed now."""
    record = {
        "webhook_id": msg_id,
        "time": utc_text(epoch_ms()),
        "status": status,
        "error": error,
        "duration_ms": duration_ms,
    }
    return json.dumps(record)


def outcome_record(msg_id: str, outcome: Attempt) -> str:
    return attempt_record(msg_id, outcome.status, outcome.error, outcome.duration_ms)


def after_failure(
    msg_id: str,
    outcome: Attempt,
    position: bytes | None,
    tries: int,
    retry_scale: float,
    *,
    listed: bool = True,
) -> dict[str, str]:
    """The endpoint's fields after its `tries`-th failed attempt in a row to deliver `msg_id`:
    disabled after a 410 Gone, failing after ATTEMPTS, else due again after the schedule's delay
    (`retry_scale` times it, or the receiver's Retry-After). Not `listed` (the endpoint stopped
    listing its type while it was sent), the event is skipped, `position` being its own: no retry,
    never failing, though a 410 still disables the endpoint."""
    fields = delivery_fields(position, tries if listed else 0, 0)
    if outcome.status == 410:
        fields.update(status=DISABLED, reason=f"The receiver answered 410 Gone to {msg_id}.")
    elif not listed:
        pass
    elif tries >= ATTEMPTS:
        fields.update(
            status=FAILING,
            reason=f"{ATTEMPTS} attempts to deliver {msg_id} failed; deliveries wait at it until"
            ' PATCH {"status": "enabled"}.',
        )
    else:
        delay = retry_delay(tries, retry_scale, outcome.retry_after)
        fields["due"] = str(epoch_ms() + int(delay * 1000))
    return fields


def count_attempt(metrics: Metrics | None, outcome: Attempt, event_time_ms: int) -> None:
    """The attempt in `metrics` (when this process keeps them): its kind, and when it delivered,
    the time since the event was written."""
    if metrics is None:
        return
    kind = "delivered" if outcome.delivered else outcome.error or "status"
    metrics.count_webhook_attempt(kind)
    if outcome.delivered:
        metrics.observe_webhook_latency(max(0.0, (epoch_ms() - event_time_ms) / 1000))
