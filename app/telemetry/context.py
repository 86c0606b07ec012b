"""The request a thread is serving, for its log lines.

A context variable, as structlog and OpenTelemetry keep theirs: each request thread (and each
context) sees only its own request, with no lock and nothing kept once the request ends.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

#: The WSGI environ of the request being served, or None outside a request.
CURRENT_ENVIRON: ContextVar[dict[str, Any] | None] = ContextVar("plants_environ", default=None)
#: The environ keys the service adds: the request's id, and the kind of token its caller sent.
REQUEST_ID = "plants.request_id"
CALLER_KIND = "plants.caller_kind"
#: The rule that routed the request (`/plants/<plant_id>`), kept past the request's context.
ROUTE = "plants.route"
