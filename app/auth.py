"""Bearer authentication (RFC 6750) for the plants blueprint."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from werkzeug.exceptions import HTTPException

from .errors import InsufficientScope, InvalidToken, MalformedCredentials, MissingCredentials
from .settings import TOKEN_SYNTAX


def accepted_token(token: str, accepted: Iterable[bytes]) -> bytes | None:
    """The accepted token equal to `token`, comparing with every one in constant time."""
    presented = token.encode("ascii")
    matched = None
    for candidate in accepted:
        if hmac.compare_digest(candidate, presented):
            matched = candidate
    return matched


# The refusals, built once: they are only read (by error_response), never raised, so
# requests can share them. Building one per refusal was a third of the 401 path's own work.
NO_CREDENTIALS = MissingCredentials("This operation needs an 'Authorization: Bearer <token>' header.")
NOT_BEARER = MissingCredentials("The Authorization header must use the Bearer scheme.")
MALFORMED_TOKEN = MalformedCredentials("The bearer token is empty or is not a valid token.")
TOKEN_NOT_ACCEPTED = InvalidToken("The bearer token is not accepted.")
READ_ONLY_TOKEN = InsufficientScope(
    "This bearer token may only read: creating and deleting need a full-access token."
)

#: An authentication's outcome: the refusal, or None and the accepted token.
Outcome = tuple[HTTPException | None, bytes | None]


def check_credentials(header: str | None, accepted: Iterable[bytes]) -> Outcome:
    """Why an Authorization header value is refused, or (None, the token) when it is accepted."""
    if header is None:
        return NO_CREDENTIALS, None
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer":
        return NOT_BEARER, None
    token = credentials.strip(" ")
    if not TOKEN_SYNTAX.fullmatch(token):
        return MALFORMED_TOKEN, None
    matched = accepted_token(token, accepted)
    if matched is None:
        return TOKEN_NOT_ACCEPTED, None
    return None, matched
