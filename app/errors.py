"""The JSON Error record for every failure, built on Werkzeug's HTTP exceptions."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, Response, current_app
from werkzeug.exceptions import BadRequest, HTTPException, Unauthorized, default_exceptions

REALM = "plants"


class InvalidPlant(BadRequest):
    """A body that is JSON but not a valid NewPlant; `details` names each field."""

    def __init__(self, details: dict[str, list[str]]) -> None:
        fields = ", ".join(sorted(details))
        super().__init__(f"The request body is not a valid NewPlant. Invalid fields: {fields}.")
        self.details = details


class _BearerChallenge(HTTPException):
    """Adds the RFC 6750 `WWW-Authenticate: Bearer` challenge to the response."""

    oauth_error: str | None = None

    def get_headers(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        challenge = f'Bearer realm="{REALM}"'
        if self.oauth_error:
            challenge += f', error="{self.oauth_error}"'
        return [*super().get_headers(*args, **kwargs), ("WWW-Authenticate", challenge)]


class MissingCredentials(_BearerChallenge, Unauthorized):
    """No bearer credentials at all: the challenge carries no error (RFC 6750 §3.1)."""


class InvalidToken(_BearerChallenge, Unauthorized):
    oauth_error = "invalid_token"


class MalformedCredentials(_BearerChallenge, BadRequest):
    oauth_error = "invalid_request"


def http_error_to_json(exc: HTTPException) -> HTTPException | Response:
    """The error handler: every HTTP error as the JSON Error record; redirects pass through."""
    if exc.code is None or exc.code < 400:
        # Routing redirects are HTTPExceptions too; they are not errors.
        return exc
    return error_response(exc)


def error_response(exc: HTTPException) -> Response:
    """The JSON Error record for an HTTP error (code >= 400), keeping its status and headers."""
    record: dict[str, Any] = {"error": exc.code, "message": exc.description or exc.name}
    details = getattr(exc, "details", None)
    if details:
        record["details"] = details
    # Built directly, not through ErrorSchema.dump: a dump costs as much as the rest of the
    # handler, and the tests load every error response through ErrorSchema instead.
    response = current_app.json.response(record)
    response.status_code = exc.code
    # Allow (405), WWW-Authenticate (401) and the like; the body is ours. Werkzeug's own
    # get_headers gives only its Content-Type, so most responses need no extending.
    if type(exc).get_headers is not HTTPException.get_headers:
        response.headers.extend(
            [(name, value) for name, value in exc.get_headers() if name.lower() != "content-type"]
        )
    return response


def register_json_errors(target: Flask | Blueprint) -> None:
    """Answer every HTTP error raised in `target` with the JSON Error record.

    The handler is registered for each error status Werkzeug knows as well as for
    HTTPException: Flask prefers a host app's handler for a status (`errorhandler(400)`)
    to a blueprint's handler for a class, so without these a host's own error pages would
    replace the blueprint's JSON. Unhandled exceptions reach this too: Flask logs them and
    passes an InternalServerError, whose generic message reveals nothing.
    """
    target.register_error_handler(HTTPException, http_error_to_json)
    for code in default_exceptions:
        if code >= 400:
            target.register_error_handler(code, http_error_to_json)


class InsufficientStorage(HTTPException):
    """507: the store is at capacity (Werkzeug has no class for this status)."""

    code = 507
    description = "The store is full and cannot take a new plant."
