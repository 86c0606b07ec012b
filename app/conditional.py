"""Conditional requests (RFC 9110 §8.8.3, §13), kept in one place: a plant's ETag, the 304 of a
conditional GET, and the preconditions of PUT, PATCH and DELETE, which the store checks in the
same atomic step as the write.

A plant's ETag is strong and derived from its name and tag alone (app.store.plant_etag), so it is
the same from every worker and host of one store and costs no stored byte.
"""

from __future__ import annotations

import re

from flask import Request, Response, current_app
from werkzeug.exceptions import HTTPException, PreconditionFailed, PreconditionRequired

from .errors import InvalidFields
from .store import ANY_PLANT, UNCONDITIONAL, Plant, Precondition, plant_etag

# RFC 9110 §8.8.3 and §13.1.1: an unquoted "*", or a comma-separated list of entity-tags, each
# optionally weak (W/), with optional spaces and tabs. Obsolete non-ASCII tag characters are
# refused. The served document's pattern for both headers is this one.
_ENTITY_TAG = r'(?:W/)?"[\x21\x23-\x7e]*"'
_ETAG_LIST = re.compile(rf"[ \t]*(?:\*|{_ENTITY_TAG}(?:[ \t]*,[ \t]*{_ENTITY_TAG})*)[ \t]*")
_ONE_TAG = re.compile(r'(W/)?"([\x21\x23-\x7e]*)"')


def parse_entity_tags(value: str, *, strong: bool) -> frozenset[str] | None:
    """The opaque values a conditional header names, ANY_PLANT for its unquoted `*`; None when it
    is malformed. `strong` (If-Match) leaves weak tags out: they never match strongly.

    The one parser of both headers: Werkzeug's parse_etags takes a quoted `"*"` for the wildcard,
    which RFC 9110 makes an ordinary entity-tag.
    """
    if not _ETAG_LIST.fullmatch(value):
        return None
    if value.strip(" \t") == "*":
        return frozenset({ANY_PLANT})
    return frozenset(opaque for weak, opaque in _ONE_TAG.findall(value) if not (strong and weak))


class InvalidHeader(InvalidFields):
    """A conditional header that is not `*` or a list of entity-tags; `details` names it."""

    def __init__(self, header: str) -> None:
        super().__init__(
            "A conditional header is malformed.",
            "headers",
            {header: ['Must be "*" or a comma-separated list of entity-tags such as "3f2a9c4e1b7d5a60".']},
        )


def etag_of(plant: Plant) -> str:
    return plant_etag(plant.name, plant.tag)


def with_etag(response: Response, plant: Plant) -> Response:
    # Added, not set: the response is new, so there is no ETag to replace, and 16 hex digits
    # need none of set_etag's quoting checks (half the cost of `set`, on every plant answered).
    response.headers.add("ETag", f'"{etag_of(plant)}"')
    return response


#: Each conditional header's WSGI environ key, read there without building the Headers view.
_ENVIRON_KEYS = {"If-Match": "HTTP_IF_MATCH", "If-None-Match": "HTTP_IF_NONE_MATCH"}


def _etags(req: Request, header: str, *, strong: bool) -> frozenset[str] | None:
    """The header's opaque entity-tags (None when it was not sent); InvalidHeader when malformed."""
    value = req.environ.get(_ENVIRON_KEYS[header])
    if value is None:
        return None
    tags = parse_entity_tags(value, strong=strong)
    if tags is None:
        raise InvalidHeader(header)
    return tags


def not_modified(req: Request, plant: Plant) -> Response | None:
    """The 304 of a GET whose If-None-Match matches the plant's ETag (weak comparison)."""
    tags = _etags(req, "If-None-Match", strong=False)
    if tags is None:
        return None
    etag = etag_of(plant)
    if ANY_PLANT not in tags and etag not in tags:  # (an empty tag `""` never equals a plant's)
        return None
    # No body, so no Content-Type (the class's default mimetype is dropped).
    response = Response(status=304, headers={"ETag": f'"{etag}"'})
    del response.headers["Content-Type"]
    return response


def write_precondition(req: Request) -> Precondition:
    """The precondition of a PUT, PATCH or DELETE; 400 for a malformed header, 428 when
    PLANTS_REQUIRE_IF_MATCH is on and none was sent."""
    match = _etags(req, "If-Match", strong=True)
    none_match = _etags(req, "If-None-Match", strong=False)
    if match is None and none_match is None:
        if current_app.extensions["plants"].require_if_match:
            raise PreconditionRequired(
                "This service requires a conditional request: send If-Match with the plant's ETag"
                ' (from GET), or "If-None-Match: *" to create with PUT.'
            )
        return UNCONDITIONAL
    return Precondition(match, none_match)


def precondition_failed(plant_id: int, *, absent: bool = False) -> HTTPException:
    if absent:
        return PreconditionFailed(
            f"There is no plant with id {plant_id} to match If-Match: nothing was created. Send the"
            " replacement without If-Match (or with If-None-Match: *) to create it."
        )
    return PreconditionFailed(
        f"The plant with id {plant_id} does not match the request's precondition (If-Match or"
        " If-None-Match): it was changed, created or deleted since you read it. Nothing changed;"
        " read it again (GET) for its current ETag."
    )
