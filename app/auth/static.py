"""The bearer header (RFC 6750 §2.1) and the static tokens of PLANTS_API_TOKENS and PLANTS_READ_TOKENS."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from werkzeug.exceptions import HTTPException

from app.auth.caller import Caller
from app.errors import InsufficientScope, InvalidToken, MalformedCredentials, MissingCredentials
from app.settings.tokens import TOKEN_SYNTAX


def accepted_token(token: str, accepted: Iterable[bytes]) -> bytes | None:
    """The accepted token equal to `token`, comparing with every one in constant time."""
    presented = token.encode("ascii")
    matched = None
    for candidate in accepted:
        if hmac.compare_digest(candidate, presented):
            matched = candidate
    return matched


# The refusals, built once: they are only read (by error_response), never raised, so
# requests can share them: building one per refusal would be a large part of the 401 path's work.
NO_CREDENTIALS = MissingCredentials(
    "This operation needs an 'Authorization: Bearer <token>' header.", reason="missing"
)
#: No Authorization header, and a `?ticket=` on an operation other than the watch: told where a
#: ticket goes, as TICKET_AS_TOKEN tells it sent as the bearer token. Still the bare challenge:
#: no credentials were sent where this operation reads them (RFC 6750 §3.1).
TICKET_WITHOUT_TOKEN = MissingCredentials(
    "This operation needs an 'Authorization: Bearer <token>' header: a watch ticket opens only the"
    " watch of the feed, GET /events?ticket=... (a stream or a long-poll). Send the token that minted"
    " it here.",
    reason="missing",
)
NOT_BEARER = MissingCredentials("The Authorization header must use the Bearer scheme.", reason="not_bearer")
#: `Bearer<TAB>token`, `Bearertoken`: the scheme is Bearer, its separator is not a space.
NOT_SPACED = MissingCredentials(
    "The Authorization header must be 'Bearer', a space, then the token: another separator (a tab)"
    " or none is not accepted.",
    reason="not_bearer",
)
MALFORMED_TOKEN = MalformedCredentials(
    "The bearer token is empty or is not a valid token.", reason="malformed"
)
TOKEN_NOT_ACCEPTED = InvalidToken("The bearer token is not accepted.", reason="not_accepted")
#: A watch ticket (`plwt_...`) sent as the bearer token: refused as any token not accepted, and told
#: where a ticket goes (app/auth/watch_tickets.py).
TICKET_AS_TOKEN = InvalidToken(
    "The bearer token is a watch ticket, not a token: a ticket serves only GET /events?ticket=..."
    " (a stream or a long-poll), sent without an Authorization header. Send the token that minted"
    " it here.",
    reason="not_accepted",
)
READ_ONLY_TOKEN = InsufficientScope(
    "This bearer token may only read: creating, changing and deleting need a full-access token.",
    reason="read_only",
)
#: Webhook endpoints hold their signing secrets: a read-only token may not even list them.
READ_ONLY_WEBHOOKS = InsufficientScope(
    "This bearer token may only read plants: webhook endpoints hold signing secrets, and every"
    " /webhooks operation needs a full-access token.",
    reason="read_only",
)


def bearer_token(header: str | None) -> tuple[HTTPException | None, str]:
    """The token of an Authorization header value, or why the header is refused."""
    if header is None:
        return NO_CREDENTIALS, ""
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer":
        # Past "Bearer", the scheme's own word ends at the first space: a tab or the token itself.
        return (NOT_SPACED if scheme[:6].lower() == "bearer" else NOT_BEARER), ""
    token = credentials.strip(" ")
    if not TOKEN_SYNTAX.fullmatch(token):
        return MALFORMED_TOKEN, ""
    return None, token


class StaticTokens:
    """The configured tokens, each with its caller: full access, or read-only."""

    def __init__(self, full: Iterable[str], read_only: Iterable[str]) -> None:
        self.callers: dict[bytes, Caller] = {}
        for token in full:
            key = token.encode("ascii")
            self.callers[key] = Caller(key, None, None, None)
        for token in read_only:
            key = token.encode("ascii")
            self.callers[key] = Caller(key, None, READ_ONLY_TOKEN, READ_ONLY_WEBHOOKS, "read-only")

    def caller(self, token: str) -> Caller | None:
        """The caller of `token`, compared with every configured token in constant time."""
        matched = accepted_token(token, self.callers)
        return None if matched is None else self.callers[matched]
