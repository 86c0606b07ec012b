"""Reading a write's body: its content type, its bytes within the limit, and strict JSON."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import IO, Any

from flask import Request, request
from werkzeug.exceptions import ClientDisconnected, HTTPException, RequestEntityTooLarge, UnsupportedMediaType
from werkzeug.wsgi import LimitedStream, get_content_length

from app.compat import werkzeug as body_cache
from app.errors import (
    MERGE_PATCH,
    UTF8_ONLY,
    BodyCutShort,
    BodyReadByHost,
    BodyTooLarge,
    EncodedBody,
    EncodedPatch,
    InvalidBody,
    MalformedFraming,
    NotJsonContent,
    PartialBody,
    TransferCodedBody,
    UnsupportedPatch,
)
from app.http import strict_json
from app.settings import DEFAULTS

log = logging.getLogger(__name__)

# The usual spellings, accepted without parsing the header.
_JSON_CONTENT_TYPES = frozenset(
    {"application/json", "application/json; charset=utf-8", "application/json;charset=utf-8"}
)


def bound_before_the_host(endpoints: str) -> Callable[[str | None, Any], None]:
    """For a host app without MAX_CONTENT_LENGTH: a `url_value_preprocessor` that gives a request
    to the blueprint's routes (`endpoints`: their names' prefix) the blueprint's own limit, before
    any of the host's `before_request` hooks can make `request.stream` (Flask calls the URL value
    preprocessors first). With no limit, Werkzeug hands such a hook `wsgi.input` itself wherever the
    server ends the body (gunicorn's workers; a chunked body under Werkzeug's server), and what it
    read left no trace: the write read an empty or partial body. Bounded, the stream counts what
    it read, and the write refuses it as it refuses every body the host read (BodyReadByHost)."""

    def bound(endpoint: str | None, values: Any) -> None:
        if endpoint is not None and endpoint.startswith(endpoints):
            _bound_by_default(request)

    return bound


def _bound_by_default(req: Request) -> None:
    """This request's limit (Flask's per-request `max_content_length`) the blueprint's default,
    where the app's config sets none (a host that sets it later keeps its own)."""
    if req.max_content_length is None:
        req.max_content_length = DEFAULTS["MAX_CONTENT_LENGTH"]


def read_json_object(req: Request, record: str, *, merge_patch: bool = False) -> dict[str, Any]:
    """The body as one JSON object; 501, 415, 413, 408 or 400 (naming `record`) when it is not one.

    With `merge_patch`, `application/merge-patch+json` (RFC 7396) is read as JSON is.
    """
    # A transfer coding besides chunked never gets here: the guard refuses it (`transfer_coded`).
    content = req.environ.get("HTTP_CONTENT_ENCODING")
    if content and (coding := _coding_besides(content, _CONTENT_CODINGS_READ)):
        raise (EncodedPatch if merge_patch else EncodedBody)(coding)
    if "HTTP_CONTENT_RANGE" in req.environ:
        raise PartialBody()
    if merge_patch and req.mimetype == MERGE_PATCH:
        _require_utf8(req, UnsupportedPatch)
    else:
        try:
            _require_json_content_type(req)
        except NotJsonContent as exc:
            if not merge_patch:
                raise
            if req.mimetype == "application/json":
                # The type is one a patch may have; only its charset is refused: say so.
                raise UnsupportedPatch(exc.description) from None
            raise UnsupportedPatch(
                f"A merge patch must be sent as 'Content-Type: {MERGE_PATCH}' (or application/json)."
            ) from None
    body = _read_body(req)
    if not body:
        raise InvalidBody(InvalidBody.EMPTY, record)
    try:
        value = strict_json.loads(body)
    except strict_json.InvalidJSON as exc:
        raise InvalidBody(InvalidBody.NOT_JSON, str(exc)) from None
    if not isinstance(value, dict):
        raise InvalidBody(InvalidBody.NOT_AN_OBJECT, record)
    return value


#: The codings a body is read in: none that changes its bytes (and a server's decoded `chunked`).
_CONTENT_CODINGS_READ = frozenset({"identity"})
_TRANSFER_CODINGS_READ = frozenset({"identity", "chunked"})


def transfer_coded(environ: dict[str, Any]) -> TransferCodedBody | None:
    """The 501 of a request in a transfer coding besides chunked, whatever its method, as the
    packaged worker's parser and nginx refuse it (RFC 9112 §6.1); None for any other. Only a server
    that leaves Transfer-Encoding in the environ hands one on (gunicorn's gthread, whose parser
    takes gzip, deflate and compress and decodes only the chunks): a body never read (a DELETE's)
    left it unseen, and the request was served."""
    transfer = environ.get("HTTP_TRANSFER_ENCODING")
    if transfer and (coding := _coding_besides(transfer, _TRANSFER_CODINGS_READ)):
        return TransferCodedBody(coding)
    return None


def _coding_besides(field: str, read: frozenset[str]) -> str | None:
    """The first coding a `Content-Encoding` or `Transfer-Encoding` field lists that is not one of
    those `read`, as written; None when it lists none."""
    for coding in map(str.strip, field.split(",")):
        if coding and coding.lower() not in read:
            return coding
    return None


def _require_json_content_type(req: Request) -> None:
    if req.environ.get("CONTENT_TYPE") in _JSON_CONTENT_TYPES:
        return
    if req.mimetype != "application/json":
        raise NotJsonContent()
    _require_utf8(req, NotJsonContent)


def _require_utf8(req: Request, refusal: type[UnsupportedMediaType]) -> None:
    charset = req.mimetype_params.get("charset", "utf-8").lower()
    if charset not in ("utf-8", "utf8"):
        raise refusal(UTF8_ONLY)


def _read_body(req: Request) -> bytes:
    """The whole request body, refused with 413 beyond the limit and 400/408 when unreadable."""
    # A host app without MAX_CONTENT_LENGTH still gets a bounded read here.
    limit = req.max_content_length or DEFAULTS["MAX_CONTENT_LENGTH"]
    try:
        body = _read_at_most(req, limit)
    except RequestEntityTooLarge:
        raise BodyTooLarge(limit) from None
    except (ClientDisconnected, OSError):
        raise BodyCutShort() from None
    except HTTPException:
        raise
    except Exception:
        # The WSGI server refused the body's framing (e.g. gunicorn: a bad chunk size).
        # Its exception types are its own, so they cannot be named here.
        raise MalformedFraming() from None
    if len(body) > limit:
        raise BodyTooLarge(limit)
    return body


def _read_at_most(req: Request, limit: int) -> bytes:
    """The body, or BodyTooLarge past `limit` and BodyCutShort when it ends short (Werkzeug's own
    errors for a chunked one)."""
    if not body_cache.FITS:
        return read_through_get_data(req, limit)
    earlier = body_cache.read_earlier(req)
    made = body_cache.stream_made(req)
    if made is not None:
        # A host app's own hook made `request.stream`, and may have read from it: checked before
        # `wsgi.input` is read, since a read for bytes the host took would wait on the connection.
        _refuse_a_body_read_elsewhere(req, made, len(earlier) if earlier is not None else 0)
    length = get_content_length(req.environ)
    if earlier is not None:
        # A host app's own hook read it first (`request.get_data()`): `wsgi.input` is at its end,
        # or, for a chunked body, at the host's MAX_CONTENT_LENGTH.
        _refuse_past_the_limit(req, earlier, limit)
        return earlier
    if length is None:
        return read_through_get_data(req, limit)
    # A sized body: one read of exactly that many bytes, as Werkzeug's LimitedStream would
    # allow, without its stream wrapper and read loop, which cost a good part of the view's time.
    if length > limit:
        raise BodyTooLarge(limit)
    body = req.environ["wsgi.input"].read(length)
    if len(body) < length:
        raise BodyCutShort()
    body_cache.keep(req, body)
    return body


def read_through_get_data(req: Request, limit: int) -> bytes:
    """The body as Werkzeug's public `get_data` reads it, which keeps it for the host's later
    readers: for a body of unknown length (chunked), and for every body where app/compat/werkzeug.py
    finds Werkzeug changed. What a host's hook read before is refused as the direct read refuses it."""
    # Werkzeug stops reading at the limit without an error, which would truncate the body:
    # reading one byte more tells the two apart, where this read makes the stream.
    req.max_content_length = limit + 1
    body = req.get_data()
    _refuse_a_body_read_elsewhere(req, req.stream, len(body))
    _refuse_past_the_limit(req, body, limit)
    return body


def _refuse_past_the_limit(req: Request, body: bytes, limit: int) -> None:
    """BodyTooLarge for a body past `limit`, and for a chunked one that a host's `get_data` read
    first, which stopped at the host's MAX_CONTENT_LENGTH (the limit here too) without an error:
    a byte past it is a body too large, not one complete."""
    if len(body) > limit:
        raise BodyTooLarge(limit)
    if len(body) == limit and get_content_length(req.environ) is None and req.environ["wsgi.input"].read(1):
        raise BodyTooLarge(limit)


def _refuse_a_body_read_elsewhere(req: Request, stream: IO[bytes], kept: int) -> None:
    """BodyReadByHost when more was read through `stream` than the `kept` bytes `get_data` holds:
    a host's hook read the body (`request.stream.read()`) and kept none of it, or a part."""
    if isinstance(stream, LimitedStream) and stream.tell() > kept:
        rule = req.url_rule.rule if req.url_rule is not None else req.path
        log.error(
            "Refusing %s %s: the host app read the request body before the plants blueprint and kept "
            "%s of its %s bytes; a hook that reads it uses request.get_data(), which keeps it.",
            req.method,
            rule,
            kept,
            stream.tell(),
        )
        raise BodyReadByHost()
