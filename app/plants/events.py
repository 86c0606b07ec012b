"""The change feed: `GET /events` pages through every create, change and delete, from a signed
position (docs/change-feed.md). A view of the plants blueprint; the store appends each event in
the same atomic step as its change."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from flask import Response, request

from app.auth.access_tokens import lapsed
from app.auth.caller import Caller, current_caller
from app.auth.watch_tickets import TICKET_CALLER, WATCH_ONLY
from app.errors import (
    FeedOff,
    FeedPositionExpired,
    InvalidParameters,
    TooManyWatchers,
    TooManyWatchersForToken,
)
from app.extension import PlantsState, plants_state
from app.http.conditional import answered_page, read_precondition
from app.http.cursor import EVENTS, InvalidCursor, MalformedCursor, decode_cursor, encode_cursor
from app.http.error_handler import error_response
from app.http.json_provider import json_response
from app.schemas.parameters import load_events_query
from app.store import EVENT_TYPES, Event, FeedExpiredError, PlantStore
from app.watch.filters import EventFilter, scan
from app.watch.parkable import PARKING
from app.watch.wake_up import client_left
from app.watch.watcher_caps import WatchersFull
from app.watch.watches import EventStream, LongPoll, Watch

JSON, STREAM = "application/json", "text/event-stream"
#: What a client may ask for: a stream's type is also offered with its charset (as it is sent),
#: since Werkzeug matches an Accept range's parameters exactly (`text/event-stream;charset=utf-8`
#: matches no offer without them).
OFFERED = (JSON, STREAM, f"{STREAM}; charset=utf-8")
#: A Last-Event-ID of no cursor's shape: a stream's client holds the ids it was sent, not pages.
NOT_A_STREAM_ID = (
    "Not an id this service's stream sent: send back the `id` of the last event or bookmark it"
    " received, unchanged, or leave the header out to start at `after`."
)
#: A stream's headers besides its type: no proxy buffers it (nginx reads this). Its Cache-Control
#: is every guarded answer's (app/http/caching.py): a shared cache must not keep it either.
STREAM_HEADERS = {"X-Accel-Buffering": "no"}


def list_events() -> Response:
    """Up to `limit` events after `after` (a cursor, `now`, or the oldest kept) that the filter
    selects, and `next`, answered at once; or, asked to, a long-poll (`wait`) or a stream of
    server-sent events, which may start with the plants that match now (`snapshot`): those are
    `_watch`'s, which returns them to wait."""
    query = load_events_query(request.args, request.query_string)
    only = EventFilter.from_query(query)
    state = plants_state()
    store = state.serving_store(request.environ)
    if not store.events_retain:
        raise FeedOff()
    key = store.cursor_key()
    # A HEAD asking for a watch (a stream, or a long-poll that would wait) is answered the watch's
    # status and headers (RFC 9110 §9.3.2), after the same checks, the caps' included (`_watch`),
    # and holds no watch.
    streaming = _wants_stream()
    if TICKET_CALLER in request.environ and not (
        (streaming or query.get("wait")) and request.method == "GET"
    ):
        return error_response(WATCH_ONLY)
    after = query.get("after")
    field = "after"
    snapshot = _snapshot(query, streaming)
    if snapshot:
        after = "now"  # taken before the first page of plants is read
    if streaming and request.headers.get("Last-Event-ID"):
        # A reconnect resumes from its position: the snapshot was sent (its `initial_end` is a position).
        after, field, snapshot = request.headers["Last-Event-ID"].strip(), "Last-Event-ID", False
    try:
        if after == "now" and field == "after":  # never an id a stream sends: a bad Last-Event-ID
            events, position = [], store.events_now()  # type: ignore[var-annotated]
        else:
            start = None if after is None else decode_cursor(key, after, None, EVENTS)
            if only is None or streaming:
                events, position = store.events(start, 1 if streaming else query["limit"])
            else:  # past what the filter does not select, to the end of what was read
                found, position, _, _ = scan(store, start, query["limit"], only)
                events = [entry.event for entry in found]
            if streaming:
                position = start  # type: ignore[assignment]  # the stream reads from here, its first event included
    except InvalidCursor as exc:
        said = NOT_A_STREAM_ID if field == "Last-Event-ID" and isinstance(exc, MalformedCursor) else str(exc)
        raise InvalidParameters({field: [said]}) from None
    except ValueError:
        raise InvalidParameters({field: ["Not a cursor of this feed: follow it again from now."]}) from None
    except FeedExpiredError:
        raise FeedPositionExpired() from None
    if streaming or (query.get("wait") and not events):
        refusal = lapsed(current_caller(), state.metrics)
        if refusal is not None:
            return error_response(refusal)
        return _watch(state, store, key, position, query, streaming, only, snapshot)
    body = {
        "events": event_records(events),
        "next": encode_cursor(key, position, None, EVENTS),
    }
    response = answered_page(request, json_response(body))
    metrics = state.metrics
    if metrics is not None and events and response.status_code == 200:  # a 304 sends none
        metrics.count_read(len(events))
    return response


def _snapshot(query: dict[str, Any], streaming: bool) -> bool:
    """`snapshot=true`: only for a stream, and from the current position (no `after`)."""
    if not query.get("snapshot"):
        return False
    if not streaming:
        raise InvalidParameters({"snapshot": ["Only for a stream (`Accept: text/event-stream`)."]})
    if "after" in query:
        raise InvalidParameters(
            {"snapshot": ["Not with `after`: a snapshot starts at the current position."]}
        )
    return True


def _wants_stream() -> bool:
    accepted = request.accept_mimetypes
    chosen = accepted.best_match(OFFERED, default=JSON)
    return chosen != JSON and accepted[chosen] > 0


def _watch(
    state: PlantsState,
    store: PlantStore,
    key: bytes,
    position: Any,
    query: dict[str, Any],
    streaming: bool,
    only: EventFilter | None,
    snapshot: bool = False,
) -> Response:
    """A watch of the feed, once the caps admit it (429 for the token, 503 for this process; a
    HEAD is answered its headers then, holding no place): a
    `LongPoll` or an `EventStream` (app/watch/watches.py) returned as the answer's iterable, which
    waits between its chunks (`Watch.__next__`): parked without a thread where the server offers it
    (`PARKING` in the environ, app/watch/parkable.py; the packaged worker's
    app/server/worker/parking.py), else blocked in this request thread (`Watch._block`)."""
    signal = state.feed_signal
    caller = current_caller()  # a watch ticket's counts against its token's cap
    caller_key = caller.limit_key
    try:
        signal.admit(caller_key)
    except WatchersFull as exc:
        raise (
            TooManyWatchersForToken(signal.max_per_caller) if exc.per_caller else TooManyWatchers()
        ) from None
    # Judged once admitted, as a 429 or 503 would be answered whatever the preconditions (RFC 9110
    # §13.2.1); a watch's answer has no ETag (its events are not known yet). The place is the
    # watch's once its answer holds it (the watch gives it back at its close); on every other way
    # out (a 412 raised, a 304 returned, a HEAD answered, a failure) it is given back here.
    watching = None
    try:
        unwatched = read_precondition(request, None)
        if unwatched is not None:
            return unwatched
        if request.method == "HEAD":  # the GET's status and headers; its place is given back
            return _watch_answer(iter(()), streaming)
        watch = _start(state, store, caller, key, position, query, streaming, only, snapshot)
        watching = _watch_answer(watch, streaming)
        return watching
    finally:
        if watching is None:
            signal.release(caller_key)


def _start(
    state: PlantsState,
    store: PlantStore,
    caller: Caller,
    key: bytes,
    position: Any,
    query: dict[str, Any],
    streaming: bool,
    only: EventFilter | None,
    snapshot: bool,
) -> Watch:
    """The admitted watch, which holds its caller's place until its close."""
    settings = state.settings
    common: dict[str, Any] = {
        "cursor_key": key,
        "caller": caller.limit_key,
        "expires": caller.expires,
        "holds": state.auth.holding(request.headers.get("Authorization")),
        "parkable": bool(request.environ.get(PARKING)),
        # Where it blocks in this thread, it looks whether its client left (a parked one's server does).
        "client_left": client_left(request.environ),
        "records": event_records,
        "only": only,
    }
    if streaming:
        return EventStream(
            store,
            state.feed_signal,
            position,
            heartbeat=settings.events_heartbeat,
            stream_max=settings.events_stream_max,
            # `snapshot=true` asks for bookmarks on its reconnects too (`Last-Event-ID`, the same
            # URL), which send no snapshot again.
            bookmarks=only is not None or bool(query.get("snapshot") or query.get("bookmarks")),
            snapshot=snapshot,
            **common,
        )
    after = encode_cursor(key, position, None, EVENTS)
    wait = min(query["wait"], settings.events_max_wait)
    return LongPoll(
        store, state.feed_signal, position, wait=wait, limit=query["limit"], after=after, **common
    )


def _watch_answer(body: Iterable[bytes], streaming: bool) -> Response:
    """A watch's answer, a GET's or (empty) a HEAD's: no ETag, no length (RFC 9110 §9.3.2)."""
    if streaming:
        return Response(body, mimetype=STREAM, headers=STREAM_HEADERS, direct_passthrough=True)
    return Response(body, mimetype=JSON, direct_passthrough=True)


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
