"""Bearer authentication (RFC 6750) for the plants blueprint."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from flask import Response, current_app, request
from werkzeug.exceptions import HTTPException

from .errors import InvalidToken, MalformedCredentials, MissingCredentials, error_response
from .settings import TOKEN_SYNTAX


def token_accepted(token: str, accepted: Iterable[bytes]) -> bool:
    """Compare `token` with every accepted token in constant time, without stopping early."""
    presented = token.encode("ascii")
    matched = False
    for candidate in accepted:
        matched |= hmac.compare_digest(candidate, presented)
    return matched


def credentials_problem(header: str | None, accepted: Iterable[bytes]) -> HTTPException | None:
    """Why an Authorization header value is refused, or None when its bearer token is accepted."""
    if header is None:
        return MissingCredentials("This operation needs an 'Authorization: Bearer <token>' header.")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer":
        return MissingCredentials("The Authorization header must use the Bearer scheme.")
    token = credentials.strip(" ")
    if not TOKEN_SYNTAX.fullmatch(token):
        return MalformedCredentials("The bearer token is empty or is not a valid token.")
    if not token_accepted(token, accepted):
        return InvalidToken("The bearer token is not accepted.")
    return None


def require_bearer_token() -> Response | None:
    """before_request hook: let the request through only with an accepted bearer token.

    It runs before the body is read, so an unauthenticated client cannot make
    the service read or parse anything. A refusal is returned, not raised: Flask
    then answers with it and skips the view, without its exception handling.
    """
    problem = credentials_problem(
        request.environ.get("HTTP_AUTHORIZATION"), current_app.extensions["plants"].tokens
    )
    return None if problem is None else error_response(problem)
