"""The JSON Error record for every failure, built on Werkzeug's HTTP exceptions."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, Response
from werkzeug.exceptions import (
    BadRequest,
    Forbidden,
    HTTPException,
    NotFound,
    Unauthorized,
    default_exceptions,
)

from .json_provider import json_response

REALM = "plants"


class InvalidFields(BadRequest):
    """A request part that marshmallow refused; `details` names each field and says why."""

    def __init__(self, problem: str, kind: str, details: dict[str, list[str]]) -> None:
        super().__init__(f"{problem} Invalid {kind}: {', '.join(sorted(details))}.")
        self.details = details


class InvalidPlant(InvalidFields):
    """A body that is JSON but not a valid NewPlant."""

    def __init__(self, details: dict[str, list[str]]) -> None:
        super().__init__("The request body is not a valid NewPlant.", "fields", details)


class InvalidParameters(InvalidFields):
    """A path or query parameter that is not valid (`id`, `limit`, `after`, `tags`, or unknown)."""

    def __init__(self, details: dict[str, list[str]]) -> None:
        super().__init__("The request's parameters are not valid.", "parameters", details)


class PlantNotFound(NotFound):
    def __init__(self, plant_id: int) -> None:
        super().__init__(f"There is no plant with id {plant_id}.")


class _BearerChallenge(HTTPException):
    """Adds the RFC 6750 `WWW-Authenticate: Bearer` challenge to the response.

    `reason` names the refusal in the metrics (`plants_auth_refusals_total{reason}`); a JWT
    refusal also says which check failed (`error_description`) and which scope was needed.
    """

    oauth_error: str | None = None

    def __init__(
        self,
        description: str,
        *,
        reason: str,
        error_description: str | None = None,
        scope: str | None = None,
    ) -> None:
        super().__init__(description)
        self.reason = reason
        # Fixed texts of this module's callers: never a token, and never a quote or backslash.
        self.challenge = f'Bearer realm="{REALM}"'
        if self.oauth_error:
            self.challenge += f', error="{self.oauth_error}"'
        if error_description:
            self.challenge += f', error_description="{error_description}"'
        if scope:
            self.challenge += f', scope="{scope}"'

    def get_headers(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        return [*super().get_headers(*args, **kwargs), ("WWW-Authenticate", self.challenge)]


class MissingCredentials(_BearerChallenge, Unauthorized):
    """No bearer credentials at all: the challenge carries no error (RFC 6750 §3.1)."""


class InvalidToken(_BearerChallenge, Unauthorized):
    oauth_error = "invalid_token"


class MalformedCredentials(_BearerChallenge, BadRequest):
    oauth_error = "invalid_request"


class InsufficientScope(_BearerChallenge, Forbidden):
    """A read-only token on a write, or a JWT without the operation's scope (RFC 6750 §3.1)."""

    oauth_error = "insufficient_scope"


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
    response = json_response(record)
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
