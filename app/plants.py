"""The plants blueprint: POST /plants, behind one guard (bearer token, then rate limits).

Register it in any Flask app; its settings come from that app's config and its
store lives in that app's `extensions["plants"]`, so apps never share plants.
"""

from __future__ import annotations

import logging

from flask import Blueprint, Request, Response, current_app, request
from flask.blueprints import BlueprintSetupState
from limits.errors import StorageError
from marshmallow import ValidationError
from redis.exceptions import RedisError
from werkzeug.exceptions import (
    BadRequest,
    ClientDisconnected,
    Conflict,
    HTTPException,
    MethodNotAllowed,
    RequestEntityTooLarge,
    RequestTimeout,
    ServiceUnavailable,
    UnsupportedMediaType,
)
from werkzeug.wsgi import get_content_length

from . import docs, strict_json
from .auth import check_credentials
from .errors import InsufficientStorage, InvalidPlant, error_response, register_json_errors
from .metrics import count_store_error, exposition, start_timer
from .rate_limits import RateLimitExceeded, add_headers, remember
from .schemas import NewPlantSchema, PlantSchema
from .settings import DEFAULTS
from .state import EXTENSION, state_for
from .store import Outcome, StoreFullError, StoreUnavailableError
from .store.redis import unavailable

log = logging.getLogger(__name__)


bp = Blueprint("plants", __name__)
register_json_errors(bp)
docs.add_routes(bp)
bp.add_url_rule("/metrics", view_func=exposition, methods=["GET"])

_new_plant_schema = NewPlantSchema()
_plant_schema = PlantSchema()


@bp.after_request
def _finish(response: Response) -> Response:
    """Every answer of the blueprint: counted in the metrics, with the rate-limit headers."""
    state = current_app.extensions[EXTENSION]
    if state.metrics is not None:
        state.metrics.observe(request._get_current_object(), response)
    if state.rate_limits is not None:
        add_headers(request.environ, response)
    return response


@bp.record
def _init_state(setup: BlueprintSetupState) -> None:
    """Fail closed at registration: no tokens configured, no service."""
    app = setup.app
    if EXTENSION not in app.extensions:
        app.extensions[EXTENSION] = state_for(app)


# The usual spellings, accepted without parsing the header.
_JSON_CONTENT_TYPES = frozenset(
    {"application/json", "application/json; charset=utf-8", "application/json;charset=utf-8"}
)


def _require_json_content_type(req: Request) -> None:
    if req.environ.get("CONTENT_TYPE") in _JSON_CONTENT_TYPES:
        return
    if req.mimetype != "application/json":
        raise UnsupportedMediaType("The request body must be sent as 'Content-Type: application/json'.")
    charset = req.mimetype_params.get("charset", "utf-8").lower()
    if charset not in ("utf-8", "utf8"):
        raise UnsupportedMediaType("JSON must be encoded as UTF-8.")


def _read_body(req: Request) -> bytes:
    """The whole request body, refused with 413 beyond the limit and 400/408 when unreadable."""
    # A host app without MAX_CONTENT_LENGTH still gets a bounded read here.
    limit = req.max_content_length or DEFAULTS["MAX_CONTENT_LENGTH"]
    try:
        body = _read_at_most(req, limit)
    except RequestEntityTooLarge:
        raise _too_large(limit) from None
    except (ClientDisconnected, OSError):
        # The body stalled past the server's read timeout, or the client left.
        raise RequestTimeout(
            "The request body was not received in full before the client stopped sending."
        ) from None
    except HTTPException:
        raise
    except Exception:
        # The WSGI server refused the body's framing (e.g. gunicorn: a bad chunk size).
        # Its exception types are its own, so they cannot be named here.
        raise BadRequest("The request body's framing is malformed (e.g. an invalid chunk).") from None
    if len(body) > limit:
        raise _too_large(limit)
    return body


def _read_at_most(req: Request, limit: int) -> bytes:
    """The body, or RequestEntityTooLarge past `limit` and ClientDisconnected when it ends short."""
    length = get_content_length(req.environ)
    if length is None:
        # A body of unknown length (chunked). Werkzeug stops reading it at the limit without
        # an error, which would truncate it. Reading one byte more tells the two apart.
        req.max_content_length = limit + 1
        return req.get_data(cache=False)
    # A sized body: one read of exactly that many bytes, as Werkzeug's LimitedStream would
    # allow, without its stream wrapper and read loop (measured: a fifth of the view's time).
    if length > limit:
        raise RequestEntityTooLarge()
    body = req.environ["wsgi.input"].read(length)
    if len(body) < length:
        raise ClientDisconnected()
    return body


def _too_large(limit: int) -> RequestEntityTooLarge:
    return RequestEntityTooLarge(f"The request body is larger than the limit of {limit} bytes.")


@bp.post("/plants", provide_automatic_options=False)
def create_plant() -> Response:
    """Create a plant; an identical retry answers the same, a conflicting one 409."""
    # One context look-up each, not one per attribute: a proxied look-up costs ~0.8 µs.
    req = request._get_current_object()
    app = current_app._get_current_object()
    _require_json_content_type(req)
    body = _read_body(req)
    if not body:
        raise BadRequest("The request body is empty; send a NewPlant JSON object.")
    try:
        value = strict_json.loads(body)
    except strict_json.InvalidJSON as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(value, dict):
        raise BadRequest("The request body must be a JSON object (a NewPlant).")
    try:
        plant = _new_plant_schema.load(value)
    except ValidationError as exc:
        # Answered here rather than raised through Flask's error handling, which is 6% of
        # this path's instructions: an invalid NewPlant is the common refusal of a client.
        return error_response(InvalidPlant(exc.normalized_messages()))
    state = app.extensions[EXTENSION]
    store = state.store
    if state.split_guard is not None:
        state.split_guard.check(req.environ)
    try:
        outcome = store.create(plant["id"], plant["name"], plant.get("tag"))
    except StoreFullError:
        raise InsufficientStorage() from None
    except StoreUnavailableError as exc:
        raise store_unavailable(exc) from None
    if outcome is Outcome.CONFLICT:
        raise Conflict(f"A plant with id {plant['id']} already exists with a different name or tag.")
    return app.json.response(_plant_schema.dump(plant))


#: Views that need no token: the document and the page, and the 405 that says only which
#: method to use.
PUBLIC_VIEWS = docs.PUBLIC_VIEWS | {"other_method"}

#: Every other method a client may try on /plants; answered here, so that an embedded
#: blueprint answers them with its JSON 405 rather than the host's page.
OTHER_METHODS = ("GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")


@bp.route("/plants", methods=OTHER_METHODS, provide_automatic_options=False)
def other_method() -> Response:
    raise MethodNotAllowed(valid_methods=["POST"])


@bp.before_request
def _guard() -> Response | None:
    """Timing, the bearer token, then the rate limits; before the body is read.

    A refusal is returned, not raised: Flask then answers with it and skips the view, without
    its exception handling. An unauthenticated client cannot make the service read anything.
    One hook, with one look-up of the request and the state: it runs on every request.
    """
    req = request._get_current_object()
    environ = req.environ
    state = current_app.extensions[EXTENSION]
    if state.metrics is not None:
        start_timer(environ)  # refusals are timed too
    rule = req.url_rule
    if rule is not None and rule.endpoint.rpartition(".")[2] in PUBLIC_VIEWS:
        return None
    problem, token = check_credentials(environ.get("HTTP_AUTHORIZATION"), state.tokens)
    limits = state.rate_limits
    if limits is None:
        return None if problem is None else error_response(problem)
    try:
        if problem is not None:
            limits.check_auth_failure(req.remote_addr)
            return error_response(problem)
        if req.method == "POST":  # a create: the only other view that needs a token is GET
            remember(environ, limits.check_create(token))
    except RateLimitExceeded as exc:
        return error_response(exc)
    except StorageError as exc:
        return error_response(store_unavailable(limit_store_unavailable(exc)))
    return None


def limit_store_unavailable(exc: StorageError) -> StoreUnavailableError:
    """The rate limits' Redis failed: the same 503 as the store's."""
    cause = exc.storage_error
    return (
        unavailable(cause) if isinstance(cause, RedisError) else StoreUnavailableError("other", "rate limits")
    )


def store_unavailable(exc: StoreUnavailableError) -> ServiceUnavailable:
    """The 503 for a store that did not answer in time; the client may retry after a second."""
    log.warning("The plant store did not answer: %s", exc)
    count_store_error(exc.reason)
    return ServiceUnavailable("The plant store is not answering right now; retry shortly.", retry_after=1)
