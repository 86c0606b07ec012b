"""The plants themselves: create, list, read and delete (`/plants`, `/plants/{id}`).

Views of the plants blueprint, routed by its table (app/plants/routes.py) behind its guard;
replacing and patching a plant is app/plants/changes.py.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from flask import Request, Response, current_app, request
from marshmallow import ValidationError

from app.errors import InvalidParameters, InvalidPlant, PlantConflict, PlantNotFound, PlantPreconditionFailed
from app.extension import plants_state
from app.http.body import read_json_object
from app.http.conditional import (
    answered_page,
    etag_of,
    not_modified,
    plant_precondition_failed,
    with_etag,
    write_precondition,
)
from app.http.cursor import InvalidCursor, decode_cursor, encode_cursor
from app.http.error_handler import answered_where_raised
from app.http.json_provider import json_response
from app.http.links import base_url
from app.schemas.parameters import load_page_query, load_plant_id
from app.schemas.records import NewPlantSchema, PlantSchema, plant_record, stored_plant
from app.store import (
    CREATED_EVENT,
    DELETED_EVENT,
    CreateOutcome,
    Plant,
    PlantStore,
    PreconditionFailedError,
)
from app.telemetry.context import REQUEST_ID

_new_plant_schema = NewPlantSchema()
_plant_schema = PlantSchema()


@answered_where_raised
def create_plant() -> Response:
    """Create a plant; an identical retry answers the same, a conflicting one 409."""
    # One context look-up each, not one per attribute: each look-up through a proxy reads the
    # context and calls.
    req = request._get_current_object()  # type: ignore[attr-defined]
    state = plants_state(current_app._get_current_object())  # type: ignore[attr-defined]
    value = read_json_object(req, "NewPlant")
    try:
        plant = _new_plant_schema.load(value)
    except ValidationError as exc:
        raise InvalidPlant(exc.normalized_messages()) from None
    environ = req.environ
    store = state.serving_store(environ)
    # Inline: a conditional create is rare, and every create asks.
    if "HTTP_IF_MATCH" in environ or "HTTP_IF_NONE_MATCH" in environ:
        outcome = _create_if(req, store, plant["id"], Plant(plant["name"], plant.get("tag")))
    else:
        # The request's id goes with the event, to the webhook attempts it causes.
        origin = environ.get(REQUEST_ID, "")
        outcome = store.create(plant["id"], plant["name"], plant.get("tag"), origin=origin)
    if outcome is CreateOutcome.CONFLICT:
        raise PlantConflict(plant["id"])
    if outcome is CreateOutcome.CREATED:
        state.count_event(CREATED_EVENT, plant["id"], (plant.get("tag"),))
    response = json_response(_plant_schema.dump(plant))
    return with_etag(response, Plant(plant["name"], plant.get("tag")))


def _create_if(req: Request, store: PlantStore, number: int, new: Plant) -> CreateOutcome:
    """A create under If-Match or If-None-Match (RFC 9110 §13.1.1-2), judged against the plant
    stored with its id: with none, If-Match fails (412, nothing is created) and If-None-Match holds;
    with one, the create makes nothing (IDENTICAL or CONFLICT), and a precondition that the stored
    plant fails is 412 in place of that answer (`If-None-Match: *` always: it exists). Under
    If-Match the store is only read: the create can hold only where a plant is stored, and then it
    writes nothing, so nothing can be created between the check and the write."""
    precondition = write_precondition(req, required=False)
    current: Plant | None
    if precondition.allows_absent():
        outcome = store.create(number, new.name, new.tag, origin=req.environ.get(REQUEST_ID, ""))
        if outcome is CreateOutcome.CREATED:
            return outcome
        # Deleted since the create's step (None): the conflict it met is the answer.
        current = new if outcome is CreateOutcome.IDENTICAL else store.get(number)
    else:
        current = store.get(number)
        if current is None:
            raise PlantPreconditionFailed(number, absent=True)
        outcome = CreateOutcome.IDENTICAL if current == new else CreateOutcome.CONFLICT
    if current is not None and not precondition.allows(etag_of(current)):
        raise plant_precondition_failed(number, precondition)
    return outcome


def list_plants() -> Response:
    """One page of plants in the store's order; `next` and `Link` lead to the following page. The
    page has an ETag, so If-None-Match and If-Match are judged as on a plant."""
    query = load_page_query(request.args, request.query_string)
    tags = query.get("tags")
    store = plants_state().serving_store(request.environ)
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
    return answered_page(request, response)


def _next_url(args: Any, cursor: str) -> str:
    """This request's URL with `after` set to `cursor` and its other parameters kept."""
    pairs = [(name, value) for name, value in args.items(multi=True) if name != "after"]
    return f"{base_url()}?{urlencode([*pairs, ('after', cursor)], quote_via=quote)}"


def get_plant(plant_id: str) -> Response:
    """The plant with this id, as the create answers it; 404 when there is none."""
    number = load_plant_id(plant_id)
    req = request._get_current_object()  # type: ignore[attr-defined]
    plant = plants_state().serving_store(req.environ).get(number)
    if plant is None:
        raise PlantNotFound(number)
    return not_modified(req, plant) or with_etag(json_response(plant_record(plant)), plant)


def delete_plant(plant_id: str) -> Response:
    """Remove the plant and free its place in the store: 204, 404 when there is none, 412 when
    it does not match If-Match."""
    number = load_plant_id(plant_id)
    state = plants_state()
    precondition = write_precondition(request._get_current_object(), state.settings.require_if_match)  # type: ignore[attr-defined]
    try:
        deleted = state.serving_store(request.environ).delete(
            number, precondition, origin=request.environ.get(REQUEST_ID, "")
        )
    except PreconditionFailedError:
        raise plant_precondition_failed(number, precondition) from None
    if not deleted:
        raise PlantNotFound(number)
    state.count_event(DELETED_EVENT, number, (), with_before=True)  # the tag it had: the store's
    response = Response(status=204)
    del response.headers["Content-Type"]  # no content, so no type (Werkzeug sets one by default)
    return response
