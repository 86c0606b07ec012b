"""Conditional requests (RFC 9110 §8.8.3, §13), kept in one place: a plant's ETag, a page's, the
304 or 412 of a conditional GET, and the preconditions of PUT, PATCH and DELETE, which the store
checks in the same atomic step as the write.

A plant's ETag is strong and derived from its name and tag alone (app.store.plant_etag), so it is
the same from every worker and host of one store and costs no stored byte. A page's (of `/plants`
or of the feed) is a digest of its body, which every worker and host of one store answers alike
(its cursor is signed with the store's key); a watch's answer is not known when its headers go,
so it has none.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from flask import Request, Response
from werkzeug.datastructures import Headers
from werkzeug.exceptions import PreconditionFailed
from werkzeug.http import generate_etag, remove_entity_headers

from app.errors import (
    ConditionalRequestRequired,
    PageChangedSinceRead,
    PlantChangedSinceRead,
    PlantPreconditionFailed,
)
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
    environ = req.environ
    if "HTTP_IF_MATCH" not in environ and "HTTP_IF_NONE_MATCH" not in environ:
        return None
    return read_precondition(req, etag_of(plant), PlantChangedSinceRead)


def read_precondition(
    req: Request, etag: str | None, failed: Callable[[], PreconditionFailed] = PageChangedSinceRead
) -> Response | None:
    """RFC 9110 §13.2.2 for a GET or HEAD whose answer has the entity-tag `etag`, or none (None):
    `failed` (412) when If-Match does not match it strongly (`*` matches any answer); a 304 when
    If-None-Match matches it weakly, or is `*` (the resource has a representation). None: answer
    as without them. Called once the answer would be a 2xx (§13.2.1: errors come first)."""
    require_match(req, etag, failed)
    value = req.environ.get("HTTP_IF_NONE_MATCH")
    if value is None:
        return None
    # The common revalidation sends back the one tag it was given: matched without parsing.
    if etag is None or (value != f'"{etag}"' and value != f'W/"{etag}"'):
        tags = parse_entity_tags(value, strong=False)
        # (an empty tag `""` never equals an ETag this service makes)
        if ANY_PLANT not in tags and (etag is None or etag not in tags):
            return None
    return _NotModified(status=304, headers=[] if etag is None else [("ETag", f'"{etag}"')])


def require_match(req: Request, etag: str | None, failed: Callable[[], PreconditionFailed]) -> None:
    """`failed` (412) when the request's If-Match does not match `etag` strongly (`*` matches any
    answer, None none but `*`); nothing without If-Match."""
    match = _etags(req, "If-Match", strong=True)
    if match is not None and ANY_PLANT not in match and (etag is None or etag not in match):
        raise failed()


def answered_page(
    req: Request,
    response: Response,
    failed: Callable[[], PreconditionFailed] = PageChangedSinceRead,
    etag: str | None = None,
) -> Response:
    """A page's answer with its ETag, a digest of its body (`etag`, when the caller keeps it), or
    its 304 or 412 (read_precondition). The digest is Werkzeug's (`generate_etag`, SHA-1): the
    quickest here where the CPU hashes it (SHA extensions), and the hash is most of what an ETag
    costs a page."""
    etag = etag or generate_etag(response.get_data())
    unchanged = read_precondition(req, etag, failed)
    if unchanged is not None:
        return unchanged
    response.headers.add("ETag", f'"{etag}"')
    return response


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


def plant_precondition_failed(plant_id: int, precondition: Precondition) -> PlantPreconditionFailed:
    """The 412 of a write whose precondition the stored plant fails. Sent without If-Match, only
    If-None-Match can have failed, and the message says how (the plant is stored, or its ETag is
    listed) rather than that the plant changed since it was read."""
    none_match = precondition.if_none_match
    if precondition.if_match is not None or none_match is None:
        return PlantPreconditionFailed(plant_id)
    return PlantPreconditionFailed(plant_id, none_match="*" if ANY_PLANT in none_match else "tag")
