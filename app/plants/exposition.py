"""`GET <prefix>/metrics`: the app's Prometheus metrics (app/metrics.py), behind the bearer token.
Each webhook endpoint's own series only for a caller that may manage webhooks (its id is theirs)."""

from __future__ import annotations

from flask import Response, request

from app.auth.caller import current_caller
from app.errors import MetricsOff, ScrapePreconditionFailed, SplitMetricsRefused
from app.extension import plants_state
from app.http.conditional import read_precondition
from app.telemetry.request_ids import NOSNIFF


def metrics() -> Response:
    """The view: the Prometheus text format."""
    from prometheus_client import CONTENT_TYPE_LATEST

    state = plants_state()
    collected = state.metrics
    if collected is None:
        raise MetricsOff()
    if request.environ.get("wsgi.multiprocess") and not collected.multiprocess:
        raise SplitMetricsRefused()
    # A scrape has no ETag: as on a watch of the feed, only `*` is met (RFC 9110 §13.2.1).
    unchanged = read_precondition(request, None, ScrapePreconditionFailed)
    if unchanged is not None:
        return unchanged
    # The guard let the caller in with read access; the per-endpoint series need the webhooks one.
    per_endpoint = current_caller().webhooks_refusal is None
    return Response(
        collected.exposition(per_endpoint=per_endpoint),
        content_type=CONTENT_TYPE_LATEST,
        # Read as the text it is, never sniffed for HTML (a label's value is the caller's text).
        headers=[NOSNIFF],
    )
