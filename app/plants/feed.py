"""The change feed: `GET /events` pages through every create, change and delete, from a signed
position (docs/change-feed.md). A view of the plants blueprint; the store appends each event in
the same atomic step as its change."""

from __future__ import annotations

import time
from typing import Any

from flask import Response, request

from app.errors import FeedOff, FeedPositionExpired, InvalidParameters
from app.extension import plants_state
from app.http.cursor import EVENTS, InvalidCursor, decode_cursor, encode_cursor
from app.http.json_provider import json_response
from app.schemas.parameters import load_events_query
from app.store import EVENT_TYPES, Event, FeedExpiredError


def list_events() -> Response:
    """Up to `limit` events after `after` (a cursor, `now`, or the oldest kept), and `next`."""
    query = load_events_query(request.args)
    state = plants_state()
    store = state.serving_store(request.environ)
    if not store.events_retain:
        raise FeedOff()
    key = store.cursor_key()
    after = query.get("after")
    try:
        if after == "now":
            events, position = [], store.events_now()  # type: ignore[var-annotated]
        else:
            start = None if after is None else decode_cursor(key, after, None, EVENTS)
            events, position = store.events(start, query["limit"])
    except InvalidCursor as exc:
        raise InvalidParameters({"after": [str(exc)]}) from None
    except ValueError:
        raise InvalidParameters({"after": ["Not a cursor of this feed: follow it again from now."]}) from None
    except FeedExpiredError:
        raise FeedPositionExpired() from None
    metrics = state.metrics
    if metrics is not None and events:
        metrics.count_read(len(events))
    body = {
        "events": event_records(events),
        "next": encode_cursor(key, position, None, EVENTS),
    }
    return json_response(body)


def event_records(events: list[Event]) -> list[dict[str, Any]]:
    """Events as the document's Event records. Each second's text is made once: a page's events
    mostly share a few seconds, and strftime was most of an event's cost."""
    records = []
    stamps: dict[int, str] = {}
    for kind, plant_id, name, tag, time_ms in events:
        seconds, millis = divmod(time_ms, 1000)
        stamp = stamps.get(seconds)
        if stamp is None:
            stamp = stamps[seconds] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        plant = {"id": plant_id, "name": name} if tag is None else {"id": plant_id, "name": name, "tag": tag}
        records.append({"type": EVENT_TYPES[kind], "plant": plant, "time": f"{stamp}.{millis:03d}Z"})
    return records
