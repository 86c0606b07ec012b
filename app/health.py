"""Endpoints of the standalone service that need no auth: liveness and readiness.

(The interface document and the API page come with the plants blueprint: app/plants/docs.py.)
"""

from __future__ import annotations

from flask import Blueprint, Response

from app.errors import KEYS_NOT_LOADED
from app.extension import plants_state
from app.http.error_handler import error_response
from app.plants.guard import store_unavailable
from app.store import StoreUnavailableError

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@bp.get("/readyz")
def readyz() -> Response | dict[str, str]:
    """Ready when the plant store answers a PING within its timeout (memory always does), and,
    with JWT access tokens on, once the identity provider's keys were loaded."""
    state = plants_state()
    try:
        state.store.ping()
    except StoreUnavailableError as exc:
        return error_response(store_unavailable(exc))
    if not state.auth.ready:
        return error_response(KEYS_NOT_LOADED)
    return {"status": "ok"}
