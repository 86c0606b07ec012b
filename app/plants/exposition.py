"""`GET <prefix>/metrics`: the app's Prometheus metrics (app/metrics.py), behind the bearer token."""

from __future__ import annotations

from flask import Response, request
from werkzeug.exceptions import NotFound

from app.errors import SplitMetricsRefused
from app.extension import plants_state


def metrics() -> Response:
    """The view: the Prometheus text format."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    collected = plants_state().metrics
    if collected is None:
        raise NotFound("Metrics are turned off (PLANTS_METRICS).")
    if request.environ.get("wsgi.multiprocess") and not collected.multiprocess:
        raise SplitMetricsRefused()
    return Response(generate_latest(collected.exposition_registry()), content_type=CONTENT_TYPE_LATEST)
