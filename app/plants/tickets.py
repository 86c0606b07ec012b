"""`POST /events/tickets`: a watch ticket (app/auth/watch_tickets.py) for the token that asks, so that a
browser's EventSource can watch the feed (`GET /events?ticket=...`) without a header."""

from __future__ import annotations

import math
import time

from flask import Response, request

from app.auth.access_tokens import lapsed
from app.auth.caller import current_caller
from app.errors import FeedOff, TicketPreconditionFailed
from app.extension import plants_state
from app.http.conditional import write_precondition
from app.http.error_handler import error_response
from app.http.json_provider import json_response
from app.telemetry.logs import rfc3339


def create_watch_ticket() -> Response:
    """A ticket bound to the request's token, read-only and watch-only, for PLANTS_WATCH_TICKET_TTL."""
    state = plants_state()
    store = state.serving_store(request.environ)
    if not store.events_retain:
        raise FeedOff()
    caller, now = current_caller(), time.time()
    # Judged at the whole second its ticket would hold (a JWT's `exp` in this very second too):
    # a ticket that would expire as it is made is refused as the token past its `exp` is.
    refusal = lapsed(caller._replace(expires=float(state.auth.tickets.expiry(caller, now))), state.metrics)
    if refusal is not None:
        return error_response(refusal)
    # The target has no current representation (each mint makes a ticket no request named, and
    # nothing is kept to read back): If-Match never holds, If-None-Match always does.
    if not write_precondition(request, required=False).allows_absent():
        raise TicketPreconditionFailed()
    ticket, expires = state.auth.tickets.mint(caller, store.cursor_key(), now)
    body = {"ticket": ticket, "expires": rfc3339(expires), "expires_in": max(0, expires - math.floor(now))}
    response = json_response(body)
    response.headers["Cache-Control"] = "no-store"  # a credential: never kept by a cache
    return response
