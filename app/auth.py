"""Bearer authentication (RFC 6750) for the plants blueprint."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from flask import current_app, request

from .errors import InvalidToken, MalformedCredentials, MissingCredentials
from .settings import TOKEN_SYNTAX


def token_accepted(token: str, accepted: Iterable[bytes]) -> bool:
    """Compare `token` with every accepted token in constant time, without stopping early."""
    presented = token.encode("ascii")
    matched = False
    for candidate in accepted:
        matched |= hmac.compare_digest(candidate, presented)
    return matched


def require_bearer_token() -> None:
    """before_request hook: let the request through only with an accepted bearer token.

    It runs before the body is read, so an unauthenticated client cannot make
    the service read or parse anything.
    """
    header = request.environ.get("HTTP_AUTHORIZATION")
    if header is None:
        raise MissingCredentials("This operation needs an 'Authorization: Bearer <token>' header.")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer":
        raise MissingCredentials("The Authorization header must use the Bearer scheme.")
    token = credentials.strip(" ")
    if not TOKEN_SYNTAX.fullmatch(token):
        raise MalformedCredentials("The bearer token is empty or is not a valid token.")
    if not token_accepted(token, current_app.extensions["plants"].tokens):
        raise InvalidToken("The bearer token is not accepted.")
