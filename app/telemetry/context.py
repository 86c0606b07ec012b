"""The keys the service adds to a request's WSGI environ, for its log lines: they outlive the
request's Flask context, so the access line, written after it, reads them too."""

from __future__ import annotations

#: The request's id (request_ids.py).
REQUEST_ID = "plants.request_id"
#: The kind of token its caller sent (app/auth/caller.py's Caller.kind).
CALLER_KIND = "plants.caller_kind"
#: The rule that routed the request (`/plants/<plant_id>`).
ROUTE = "plants.route"
