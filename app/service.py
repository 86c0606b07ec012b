"""Endpoints of the standalone service that need no auth: liveness and readiness.

(The interface document and the API page come with the plants blueprint: app/docs.py.)
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app

from .auth.access_tokens import KEYS_NOT_LOADED
from .errors import error_response
from .guard import store_unavailable
from .state import EXTENSION, get_store
from .store import StoreUnavailableError

bp = Blueprint("service", __name__)


@bp.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@bp.get("/readyz")
def readyz() -> Response | dict[str, str]:
    """Ready when the plant store answers a PING within its timeout (memory always does), and,
    with JWT access tokens on, once the identity provider's keys were loaded."""
    try:
        get_store(current_app).ping()
    except StoreUnavailableError as exc:
        return error_response(store_unavailable(exc))
    if not current_app.extensions[EXTENSION].auth.ready:
        return error_response(KEYS_NOT_LOADED)
    return {"status": "ok"}
