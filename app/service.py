"""Endpoints of the standalone service that need no auth: liveness, readiness and the document."""

from __future__ import annotations

import functools
import json
from importlib import resources

import yaml
from flask import Blueprint, Response, current_app

from .errors import error_response
from .plants import get_store, store_unavailable
from .store import StoreUnavailableError

bp = Blueprint("service", __name__)


@functools.cache
def openapi_json() -> bytes:
    """The shipped openapi.yaml as JSON bytes, read once (immutable, so safe to share)."""
    document = yaml.safe_load(resources.files(__package__).joinpath("openapi.yaml").read_text("utf-8"))
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


@bp.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@bp.get("/readyz")
def readyz() -> Response | dict[str, str]:
    """Ready when the plant store answers a PING within its timeout (memory always does)."""
    try:
        get_store(current_app).ping()
    except StoreUnavailableError as exc:
        return error_response(store_unavailable(exc))
    return {"status": "ok"}


@bp.get("/openapi.json")
def openapi() -> Response:
    return Response(openapi_json(), mimetype="application/json")
