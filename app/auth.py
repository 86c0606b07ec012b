"""Bearer authentication (RFC 6750) for the plants blueprint."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable

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


# The refusals, built once: they are only read (by error_response), never raised, so
# requests can share them. Building one per refusal was a third of the 401 path's own work.
NO_CREDENTIALS = MissingCredentials("This operation needs an 'Authorization: Bearer <token>' header.")
NOT_BEARER = MissingCredentials("The Authorization header must use the Bearer scheme.")
MALFORMED_TOKEN = MalformedCredentials("The bearer token is empty or is not a valid token.")
TOKEN_NOT_ACCEPTED = InvalidToken("The bearer token is not accepted.")


def credentials_problem(header: str | None, accepted: Iterable[bytes]) -> HTTPException | None:
    """Why an Authorization header value is refused, or None when its bearer token is accepted."""
    if header is None:
        return NO_CREDENTIALS
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer":
        return NOT_BEARER
    token = credentials.strip(" ")
    if not TOKEN_SYNTAX.fullmatch(token):
        return MALFORMED_TOKEN
    if not token_accepted(token, accepted):
        return TOKEN_NOT_ACCEPTED
    return None


def bearer_hook(public_views: frozenset[str]) -> Callable[[], Response | None]:
    """A before_request hook: let a request through only with an accepted bearer token.

    Views named in `public_views` (by endpoint name within the blueprint) need none. The
    hook runs before the body is read, so an unauthenticated client cannot make the service
    read or parse anything. A refusal is returned, not raised: Flask then answers with it and
    skips the view, without its exception handling.
    """

    def require_bearer_token() -> Response | None:
        rule = request.url_rule
        if rule is not None and rule.endpoint.rpartition(".")[2] in public_views:
            return None
        problem = credentials_problem(
            request.environ.get("HTTP_AUTHORIZATION"), current_app.extensions["plants"].tokens
        )
        return None if problem is None else error_response(problem)

    return require_bearer_token
