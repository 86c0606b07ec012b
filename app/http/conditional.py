"""Conditional requests (RFC 9110 §8.8.3, §13), kept in one place: a plant's ETag, the 304 of a
conditional GET, and the preconditions of PUT, PATCH and DELETE, which the store checks in the
same atomic step as the write.

A plant's ETag is strong and derived from its name and tag alone (app.store.plant_etag), so it is
the same from every worker and host of one store and costs no stored byte.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from flask import Request, Response
from werkzeug.datastructures import Headers
from werkzeug.http import remove_entity_headers

from app.errors import ConditionalRequestRequired, PlantChangedSinceRead
from app.store import ANY_PLANT, UNCONDITIONAL, Plant, Precondition, plant_etag

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

# RFC 9110 §8.8.3: an entity-tag, optionally weak (W/), whose opaque value is visible ASCII but
# the double quote (obsolete non-ASCII tag characters are not taken).
_ENTITY_TAG = re.compile(r'(W/)?"([\x21\x23-\x7e]*)"')


def parse_entity_tags(value: str, *, strong: bool) -> frozenset[str]:
    """The opaque values a conditional header names, or {ANY_PLANT} for its unquoted `*` alone.

    Read leniently, as most servers read it: the header is a comma-separated list, and a member
    that is not an entity-tag (`0`, `abc`, an unterminated quote, a `*` inside a list) names no
    plant, so it matches nothing; the header is never refused. `strong` (If-Match) leaves weak
    tags out: they never match strongly. Only an unquoted `*` is the wildcard (RFC 9110
    §13.1.1): `"*"` is an ordinary entity-tag that no plant has. (Werkzeug's parse_etags takes a
    quoted `"*"` for the wildcard.)
    """
    members = [member.strip(" \t") for member in value.split(",")]
    members = [member for member in members if member]
    if members == ["*"]:
        return frozenset({ANY_PLANT})
    tags = set()
    for member in members:
        tag = _ENTITY_TAG.fullmatch(member)
        if tag is not None and not (strong and tag.group(1)):
            tags.add(tag.group(2))
    return frozenset(tags)


def etag_of(plant: Plant) -> str:
    return plant_etag(plant.name, plant.tag)


def with_etag(response: Response, plant: Plant) -> Response:
    # Added, not set: the response is new, so there is no ETag to replace, and 16 hex digits
    # need none of set_etag's quoting checks (much of `set`'s cost, on every plant answered).
    response.headers.add("ETag", f'"{etag_of(plant)}"')
    return response


#: Each conditional header's WSGI environ key, read there without building the Headers view.
_ENVIRON_KEYS = {"If-Match": "HTTP_IF_MATCH", "If-None-Match": "HTTP_IF_NONE_MATCH"}


def _etags(req: Request, header: str, *, strong: bool) -> frozenset[str] | None:
    """The header's opaque entity-tags; None when it was not sent."""
    value = req.environ.get(_ENVIRON_KEYS[header])
    return None if value is None else parse_entity_tags(value, strong=strong)


def not_modified(req: Request, plant: Plant) -> Response | None:
    """The 304 of a GET whose If-None-Match matches the plant's ETag (weak comparison); 412 when
    its If-Match does not (strong comparison), checked first (RFC 9110 §13.2.2)."""
    match = _etags(req, "If-Match", strong=True)
    if match is not None and not Precondition(match).allows(etag_of(plant)):
        raise PlantChangedSinceRead()
    value = req.environ.get("HTTP_IF_NONE_MATCH")
    if value is None:
        return None
    etag = etag_of(plant)
    # The common revalidation sends back the one tag it was given: matched without parsing.
    if value != f'"{etag}"' and value != f'W/"{etag}"':
        tags = parse_entity_tags(value, strong=False)
        if ANY_PLANT not in tags and etag not in tags:  # (an empty tag `""` never equals a plant's)
            return None
    return _NotModified(status=304, headers=[("ETag", f'"{etag}"')])


class _NotModified(Response):
    """A 304: no body, so no Content-Type, never set rather than set and then deleted; and none
    of Werkzeug's corrections of a response's headers (no Location, no body to measure), but
    the removal of entity headers a host app's hook may have added (RFC 9110 §15.4.5)."""

    default_mimetype = None

    def get_wsgi_headers(self, environ: WSGIEnvironment) -> Headers:
        headers = Headers(self.headers)
        remove_entity_headers(headers)
        return headers


def write_precondition(req: Request, required: bool) -> Precondition:
    """The precondition of a PUT, PATCH or DELETE; 428 when one is `required`
    (PLANTS_REQUIRE_IF_MATCH) and none was sent."""
    match = _etags(req, "If-Match", strong=True)
    none_match = _etags(req, "If-None-Match", strong=False)
    if match is None and none_match is None:
        if required:
            raise ConditionalRequestRequired()
        return UNCONDITIONAL
    return Precondition(match, none_match)
