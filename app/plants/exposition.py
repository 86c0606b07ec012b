"""`GET <prefix>/metrics`: the app's Prometheus metrics (app/metrics.py), behind the bearer token.
Each webhook endpoint's own series only for a caller that may manage webhooks (its id is theirs)."""

from __future__ import annotations

from flask import Response, request
from werkzeug.exceptions import NotFound

from app.errors import SplitMetricsRefused
from app.extension import plants_state


def metrics() -> Response:
    """The view: the Prometheus text format."""
    from prometheus_client import CONTENT_TYPE_LATEST

    state = plants_state()
    collected = state.metrics
    if collected is None:
        raise NotFound("Metrics are turned off (PLANTS_METRICS).")
    if request.environ.get("wsgi.multiprocess") and not collected.multiprocess:
        raise SplitMetricsRefused()
    # The guard let the token in with read access; asked again here for the webhooks one.
    problem, caller = state.auth.authenticate(request.environ.get("HTTP_AUTHORIZATION"))
    per_endpoint = problem is None and caller is not None and caller.webhooks_refusal is None
    return Response(collected.exposition(per_endpoint=per_endpoint), content_type=CONTENT_TYPE_LATEST)
