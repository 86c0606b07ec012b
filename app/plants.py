"""The plants blueprint: create, list, read and delete plants, behind one guard (app/guard.py);
replacing and patching them is app/changes.py, on the same blueprint.

Register it in any Flask app; its settings come from that app's config and its store lives in
that app's `extensions["plants"]`, so apps never share plants.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from flask import Blueprint, Response, current_app, request
from flask.blueprints import BlueprintSetupState
from marshmallow import ValidationError
from werkzeug.exceptions import Conflict, MethodNotAllowed

from . import changes, docs, events
from .conditional import not_modified, precondition_failed, with_etag, write_precondition
from .cursor import InvalidCursor, decode_cursor, encode_cursor
from .errors import (
    InsufficientStorage,
    InvalidParameters,
    InvalidPlant,
    PlantNotFound,
    error_response,
    register_json_errors,
)
from .guard import ALLOWED_METHODS, guard, store_unavailable
from .json_provider import json_response
from .metrics import count_event, exposition
from .params import load_page_query, load_plant_id
from .rate_limits import add_headers
from .request_body import read_json_object
from .schemas import NewPlantSchema, PlantSchema, plant_record
from .state import EXTENSION, serving_store, state_for
from .store import (
    CREATED_EVENT,
    DELETED_EVENT,
    Outcome,
    Plant,
    PreconditionFailedError,
    StoreFullError,
    StoreUnavailableError,
)

bp = Blueprint("plants", __name__)
register_json_errors(bp)
docs.add_routes(bp)
changes.add_routes(bp)
events.add_routes(bp)
bp.add_url_rule("/metrics", view_func=exposition, methods=["GET"])
bp.before_request(guard)

_new_plant_schema = NewPlantSchema()
_plant_schema = PlantSchema()


@bp.record
def _init_state(setup: BlueprintSetupState) -> None:
    """Fail closed at registration: no tokens configured, no service."""
    app = setup.app
    if EXTENSION not in app.extensions:
        app.extensions[EXTENSION] = state_for(app)


@bp.after_request
def _finish(response: Response) -> Response:
    """Every answer of the blueprint: counted in the metrics, with the rate-limit headers."""
    state = current_app.extensions[EXTENSION]
    if state.metrics is not None:
        state.metrics.observe(request._get_current_object(), response)
    if state.rate_limits is not None:
        add_headers(request.environ, response)
    return response


@bp.errorhandler(StoreUnavailableError)
def _store_unavailable(exc: StoreUnavailableError) -> Response:
    return error_response(store_unavailable(exc))


@bp.errorhandler(StoreFullError)
def _store_full(exc: StoreFullError) -> Response:
    return error_response(InsufficientStorage())


@bp.post("/plants", provide_automatic_options=False)
def create_plant() -> Response:
    """Create a plant; an identical retry answers the same, a conflicting one 409."""
    # One context look-up each, not one per attribute: a proxied look-up costs ~0.8 µs.
    req = request._get_current_object()
    app = current_app._get_current_object()
    value = read_json_object(req, "NewPlant")
    try:
        plant = _new_plant_schema.load(value)
    except ValidationError as exc:
        # Answered here rather than raised through Flask's error handling, which is 6% of
        # this path's instructions: an invalid NewPlant is the common refusal of a client.
        return error_response(InvalidPlant(exc.normalized_messages()))
    outcome = serving_store(app, req.environ).create(plant["id"], plant["name"], plant.get("tag"))
    if outcome is Outcome.CONFLICT:
        raise Conflict(f"A plant with id {plant['id']} already exists with a different name or tag.")
    if outcome is Outcome.CREATED:
        count_event(app, CREATED_EVENT)
    response = json_response(_plant_schema.dump(plant))
    return with_etag(response, Plant(plant["name"], plant.get("tag")))


@bp.get("/plants", provide_automatic_options=False)
def list_plants() -> Response:
    """One page of plants in the store's order; `next` and `Link` lead to the following page."""
    query = load_page_query(request.args)
    tags = query.get("tags")
    store = serving_store(current_app, request.environ)
    after = None
    if "after" in query:
        try:
            after = decode_cursor(store.cursor_key(), query["after"], tags)
        except InvalidCursor as exc:
            raise InvalidParameters({"after": [str(exc)]}) from None
    try:
        page = store.page(after, query["limit"], tags)
    except ValueError:
        # Signed by this store's key, yet not a position it makes: its layout changed.
        raise InvalidParameters({"after": ["Not a cursor of this store: start the walk again."]}) from None
    body: dict[str, Any] = {"plants": [stored_plant(*plant) for plant in page.plants]}
    link = None
    if page.next is not None:
        body["next"] = cursor = encode_cursor(store.cursor_key(), page.next, tags)
        link = f'<{_next_url(request.args, cursor)}>; rel="next"'
    response = json_response(body)
    if link:
        response.headers["Link"] = link
    return response


def stored_plant(plant_id: int, name: str, tag: str | None) -> dict[str, Any]:
    """A page's item: the StoredPlant record, as StoredPlantSchema dumps it."""
    return {"id": plant_id, "name": name} if tag is None else {"id": plant_id, "name": name, "tag": tag}


def _next_url(args: Any, cursor: str) -> str:
    """This request's URL with `after` set to `cursor` and its other parameters kept."""
    pairs = [(name, value) for name, value in args.items(multi=True) if name != "after"]
    return f"{request.base_url}?{urlencode([*pairs, ('after', cursor)], quote_via=quote)}"


@bp.get("/plants/<plant_id>", provide_automatic_options=False)
def get_plant(plant_id: str) -> Response:
    """The plant with this id, as the create answers it; 404 when there is none."""
    number = load_plant_id(plant_id)
    req = request._get_current_object()
    plant = serving_store(current_app, req.environ).get(number)
    if plant is None:
        raise PlantNotFound(number)
    return not_modified(req, plant) or with_etag(json_response(plant_record(plant)), plant)


@bp.delete("/plants/<plant_id>", provide_automatic_options=False)
def delete_plant(plant_id: str) -> Response:
    """Remove the plant and free its place in the store: 204, 404 when there is none, 412 when
    it does not match If-Match."""
    number = load_plant_id(plant_id)
    precondition = write_precondition(request._get_current_object())
    try:
        deleted = serving_store(current_app, request.environ).delete(number, precondition)
    except PreconditionFailedError:
        raise precondition_failed(number) from None
    if not deleted:
        raise PlantNotFound(number)
    count_event(current_app, DELETED_EVENT)
    response = Response(status=204)
    del response.headers["Content-Type"]  # no content, so no type (Werkzeug sets one by default)
    return response


# Every other method a client may try, answered here, so that an embedded blueprint answers
# them with its JSON 405 rather than the host's page. (HEAD is served by the GET views.)
_OTHER_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")


@bp.route(
    "/plants",
    methods=[m for m in _OTHER_METHODS if m not in ALLOWED_METHODS["list_plants"]],
    provide_automatic_options=False,
)
def other_method() -> Response:
    raise MethodNotAllowed(valid_methods=ALLOWED_METHODS["list_plants"])


@bp.route(
    "/plants/<plant_id>",
    methods=[m for m in _OTHER_METHODS if m not in ALLOWED_METHODS["get_plant"]],
    provide_automatic_options=False,
)
def other_method_on_plant(plant_id: str) -> Response:
    raise MethodNotAllowed(valid_methods=ALLOWED_METHODS["get_plant"])


@bp.route(
    "/events",
    methods=[m for m in _OTHER_METHODS if m not in ALLOWED_METHODS["list_events"]],
    provide_automatic_options=False,
)
def other_method_on_events() -> Response:
    raise MethodNotAllowed(valid_methods=ALLOWED_METHODS["list_events"])
