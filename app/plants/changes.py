"""Changing a plant: `PUT /plants/{id}` replaces (or creates) it, `PATCH /plants/{id}` applies a
JSON merge patch (RFC 7396). Views of the plants blueprint; the precondition and the write are
one atomic step in the store (app/http/conditional.py says which)."""

from __future__ import annotations

from typing import Any

from flask import Response, request
from marshmallow import ValidationError

from app.errors import InvalidChange, PlantNotFound, PlantPreconditionFailed
from app.extension import PlantsState, plants_state
from app.http.body import read_json_object
from app.http.conditional import plant_precondition_failed, with_etag, write_precondition
from app.http.json_provider import json_response
from app.http.links import url_of
from app.schemas.parameters import load_plant_id
from app.schemas.records import MergePatchSchema, ReplacementSchema, plant_record
from app.store import CREATED_EVENT, KEEP, UPDATED_EVENT, Change, Plant, PreconditionFailedError
from app.telemetry.context import REQUEST_ID

_replacement_schema = ReplacementSchema()
_merge_patch_schema = MergePatchSchema()


def replace_plant(plant_id: str) -> Response:
    """Replace the plant's name and tag (a missing tag removes it), or create it: 200 or 201."""
    number = load_plant_id(plant_id)
    req = request._get_current_object()  # type: ignore[attr-defined]
    state = plants_state()
    precondition = write_precondition(req, state.settings.require_if_match)
    plant = _load(_replacement_schema, read_json_object(req, "Plant"), number, "Plant")
    store = state.serving_store(req.environ)
    try:
        # Under If-Match the plant must exist: an absent one is 412, never created.
        change, stored = store.change(
            number,
            plant["name"],
            plant.get("tag"),
            precondition,
            create=precondition.allows_absent(),
            origin=req.environ.get(REQUEST_ID, ""),
        )
    except PreconditionFailedError:
        raise plant_precondition_failed(number, precondition) from None
    if change is Change.ABSENT:
        raise PlantPreconditionFailed(number, absent=True)
    assert stored is not None  # CREATED, CHANGED and UNCHANGED answer the plant
    _count(state, change, number, stored, tag_kept=False)
    response = with_etag(json_response(plant_record(stored)), stored)
    if change is Change.CREATED:
        response.status_code = 201
        response.headers["Location"] = url_of(".get_plant", plant_id=number)
    return response


def patch_plant(plant_id: str) -> Response:
    """Apply a merge patch: `name` changes it, `tag` sets it, `"tag": null` removes it; 404 when absent."""
    number = load_plant_id(plant_id)
    req = request._get_current_object()  # type: ignore[attr-defined]
    state = plants_state()
    precondition = write_precondition(req, state.settings.require_if_match)
    body = read_json_object(req, "JSON merge patch", merge_patch=True)
    patch = _load(_merge_patch_schema, body, number, "merge patch of a Plant")
    store = state.serving_store(req.environ)
    try:
        change, stored = store.change(
            number,
            patch.get("name", KEEP),
            patch.get("tag", KEEP),
            precondition,
            create=False,
            origin=req.environ.get(REQUEST_ID, ""),
        )
    except PreconditionFailedError:
        raise plant_precondition_failed(number, precondition) from None
    if change is Change.ABSENT:
        raise PlantNotFound(number)
    assert stored is not None  # CREATED, CHANGED and UNCHANGED answer the plant
    _count(state, change, number, stored, tag_kept="tag" not in patch)
    return with_etag(json_response(plant_record(stored)), stored)


def _count(state: PlantsState, change: Change, plant_id: int, stored: Plant, *, tag_kept: bool) -> None:
    """Count the change, with the tags its plant has had: a create's, and an update's after and,
    unless it kept its tag, before (as the store tells it)."""
    if change is Change.CREATED:
        state.count_event(CREATED_EVENT, plant_id, (stored.tag,))
    elif change is Change.CHANGED:
        state.count_event(UPDATED_EVENT, plant_id, (stored.tag,), with_before=not tag_kept)


def _load(schema: Any, body: dict[str, Any], number: int, record: str) -> dict[str, Any]:
    """The body through `schema`, its `id` (if any) equal to the path's; else InvalidChange (400)."""
    try:
        value = schema.load(body)
    except ValidationError as exc:
        details = exc.normalized_messages()
    else:
        if value.get("id", number) == number:
            return value
        details = {}
    if "id" in body and "id" not in details and body["id"] != number:
        details["id"] = [f"Must equal the id in the path ({number}), or be left out."]
    raise InvalidChange(record, details)
