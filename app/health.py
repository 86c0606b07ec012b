"""Endpoints of the standalone service that need no auth: liveness and readiness.

(The interface document and the API page come with the plants blueprint: app/plants/docs.py.)
"""

from __future__ import annotations

import threading
from typing import Any

from flask import Blueprint, Flask, Response, current_app, request
from flask.blueprints import BlueprintSetupState

from app.errors import KeysNotLoaded, NotReady
from app.extension import plants_state
from app.http.options import options_view
from app.http.paths import doubled_leading_slash
from app.http.split_guard import SplitStoreError
from app.plants.guard import store_unavailable
from app.store import StoreUnavailableError
from app.telemetry.context import ROUTE

bp = Blueprint("health", __name__)
#: The app.extensions key of the app's Drain.
DRAIN = "plants.drain"


class Drain:
    """Whether the process serving the app was asked to stop (SIGTERM, app/server/gunicorn_conf.py):
    from then on /readyz is 503, so that a load balancer sends it nothing new while the requests
    in flight finish."""

    def __init__(self) -> None:
        self._started = threading.Event()

    def start(self) -> None:
        self._started.set()

    @property
    def started(self) -> bool:
        return self._started.is_set()


@bp.before_request
def _route() -> Response | None:
    """The probes' log lines name their route too (the plants blueprint's guard names its own);
    `//healthz` is a 404, as every path with a doubled slash."""
    if request.environ.get("PATH_INFO", "")[1:2] == "/":
        return doubled_leading_slash()
    if request.url_rule is not None:
        request.environ[ROUTE] = request.url_rule.rule
    return None


@bp.record_once
def _init_drain(setup: BlueprintSetupState) -> None:
    setup.app.extensions[DRAIN] = Drain()


def drain_of(app: Flask) -> Drain | None:
    return app.extensions.get(DRAIN)


# OPTIONS as on every route of the service's (app/http/options.py).
for _number, _path in enumerate(("/healthz", "/readyz")):
    bp.add_url_rule(
        _path,
        view_func=options_view(("GET", "HEAD"), f"options_{_number}"),
        methods=["OPTIONS"],
        provide_automatic_options=False,
    )


@bp.get("/healthz", provide_automatic_options=False)
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@bp.get("/readyz", provide_automatic_options=False)
def readyz() -> Response | dict[str, Any]:
    """503 once the server is stopping, and when no plant operation can succeed: the process refuses
    them (a split in-memory store), the store down or
    refusing (of the wrong kind, a replica, a wrong password), or the identity provider's keys not
    loaded yet. 200 `degraded`,
    naming the failing nodes and their bucket groups, when only some plants' operations can fail:
    a shared store's partial outage must not take every instance out of its load balancer."""
    drain = drain_of(current_app)
    if drain is not None and drain.started:
        raise NotReady("the server is stopping; its requests in flight finish", retry_after=5)
    state = plants_state()
    try:
        # The reason the plant operations' refusal logs (app/plants/__init__.py).
        state.serving_store(request.environ)
    except SplitStoreError as exc:
        raise NotReady(str(exc), retry_after=60) from None
    try:
        readiness = state.store.readiness()
    except StoreUnavailableError as exc:
        store_unavailable(exc)  # its log line and its count
        raise NotReady(f"the plant store cannot serve: {exc}") from None
    if not state.auth.ready:
        raise KeysNotLoaded()
    if not readiness.degraded:
        return {"status": "ok"}
    return {
        "status": "degraded",
        "message": "Some plants' operations fail: those whose bucket groups are on the failing nodes.",
        "failing": [
            {"node": failed.node, "groups": list(failed.groups), "cause": failed.cause}
            for failed in readiness.failing
        ],
    }
