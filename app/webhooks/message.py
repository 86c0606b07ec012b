"""What a delivery sends (Standard Webhooks 1.0.0): the payload of one feed event, its headers and
signatures (made by the `standardwebhooks` package), and when a failed attempt is tried again."""

from __future__ import annotations

import base64
import random
import re
import secrets
import time
from collections.abc import Iterable
from datetime import UTC, datetime

import orjson
from standardwebhooks import Webhook

from app.schemas.records import stored_plant
from app.store import EVENT_TYPES, Event, FeedEntry
from app.telemetry.request_ids import VALID as VALID_REQUEST_ID

#: The wait after each failed attempt, in seconds: Standard Webhooks 1.0's example schedule (at
#: once, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h). After the 10th failure the
#: endpoint is `failing`.
RETRY_DELAYS_S = (5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)
ATTEMPTS = len(RETRY_DELAYS_S) + 1
#: Each wait is drawn within this fraction of the schedule's either way, as the specification
#: recommends: receivers that failed together are not all retried at the same instant.
JITTER = 0.2


def new_secret() -> str:
    """A signing secret as the specification writes it: `whsec_` and the base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def utc_text(time_ms: int) -> str:
    """RFC 3339 in UTC with milliseconds, as the feed writes its times."""
    seconds, millis = divmod(time_ms, 1000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{millis:03d}Z"


def message_id(entry: FeedEntry) -> str:
    """The `webhook-id`: the event's own id in the feed, so every attempt and replay repeats it."""
    return f"msg_{entry.id}"


_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}").fullmatch


def origin_of(entry: FeedEntry) -> tuple[str | None, str | None]:
    """The request id and the W3C `traceparent` of the write that made the event (FeedEntry's
    `origin`), each None when there is none, or none fit for a header (the store is read, not
    trusted: a header value http.client refuses would fail every attempt)."""
    request_id, _, traceparent = entry.origin.partition(" ")
    return (
        request_id if request_id and VALID_REQUEST_ID(request_id) else None,
        traceparent if traceparent and _TRACEPARENT(traceparent) else None,
    )


def payload(event: Event) -> bytes:
    """The body: the feed's event, with the plant as `data` and its time as `timestamp`."""
    kind, plant_id, name, tag, time_ms = event
    data = stored_plant(plant_id, name, tag)
    return orjson.dumps({"type": EVENT_TYPES[kind], "timestamp": utc_text(time_ms), "data": data})


def signed_headers(msg_id: str, body: bytes, signing: Iterable[str], user_agent: str) -> dict[str, str]:
    """The headers of one attempt, signed now with each of the endpoint's current secrets."""
    now = datetime.now(tz=UTC).replace(microsecond=0)
    text = body.decode()
    return {
        "Content-Type": "application/json",
        "User-Agent": user_agent,
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": " ".join(
            Webhook(secret).sign(msg_id=msg_id, timestamp=now, data=text) for secret in signing
        ),
    }


def retry_delay(failures: int, scale: float, retry_after: float | None) -> float:
    """Seconds to wait after the `failures`-th failed attempt (1 to 9): the schedule's wait, scaled,
    within ±20%; a Retry-After (of a 429 or 503) lengthens it, up to the schedule's longest."""
    delay = RETRY_DELAYS_S[failures - 1] * scale * random.uniform(1 - JITTER, 1 + JITTER)  # noqa: S311
    if retry_after is not None:
        delay = max(delay, min(retry_after, RETRY_DELAYS_S[-1] * scale))
    return delay
