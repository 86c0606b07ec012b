"""Routes of the standalone service that need no auth: liveness and readiness.

(The interface document and the API page come with the plants blueprint: app/plants/docs.py.)
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request

from app.errors import KeysNotLoaded, NotReady
from app.extension import plants_state
from app.http.options import options_view
from app.http.paths import doubled_leading_slash
from app.http.split_guard import SplitStoreError
from app.store import StoreUnavailableError
from app.store.readiness import EVICTING  # ready all the same: the policy is the same for every instance
from app.telemetry.context import ROUTE

bp = Blueprint("health", __name__)
#: Why a full store stays ready: reads and deletes (which make room) are served by every instance alike.
FULL = (
    "The store is full (Redis, or on a cluster one of its shards, is at its maxmemory): reads and"
    " deletes are served; writes that add or change data answer 507 until Redis has room."
)


@bp.before_request
def _route() -> Response | None:
    """The probes' log lines name their route too (the plants blueprint's guard names its own);
    `//healthz` is a 404, as every path with a doubled slash."""
    if request.environ.get("PATH_INFO", "")[1:2] == "/":
        return doubled_leading_slash()
    if request.url_rule is not None:
        request.environ[ROUTE] = request.url_rule.rule
    return None


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
    a shared store's partial outage must not take every instance out of its load balancer. 200
    `degraded` and `full` when Redis is at its maxmemory: reads still work, on every instance;
    `degraded` and `evicting` (the policy) when Redis drops keys there instead of refusing."""
    state = plants_state()
    if state.stopping.is_set():
        raise NotReady("the server is stopping; its requests in flight finish", retry_after=5)
    try:
        # The reason the plant operations' refusal logs (app/plants/__init__.py).
        state.serving_store(request.environ)
    except SplitStoreError as exc:
        raise NotReady(str(exc), retry_after=60) from None
    try:
        readiness = state.store.readiness()
    except StoreUnavailableError as exc:
        state.store_unavailable(exc)  # its log line and its count
        raise NotReady(f"the plant store cannot serve: {exc}") from None
    if not state.auth.ready:
        raise KeysNotLoaded()
    if not readiness.degraded:
        return {"status": "ok"}
    body: dict[str, Any] = {"status": "degraded"}
    messages = []
    if readiness.failing:
        messages.append("Some plants' operations fail: those whose bucket groups are on the failing nodes.")
        body["failing"] = [
            {"node": failed.node, "groups": list(failed.groups), "cause": failed.cause}
            for failed in readiness.failing
        ]
    if readiness.full:
        body["full"] = True
        messages.append(FULL)
    if readiness.evicting:
        body["evicting"] = readiness.evicting
        messages.append(EVICTING.format(policy=readiness.evicting))
    return {**body, "message": " ".join(messages)}
