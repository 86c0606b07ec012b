"""Who is calling, and what it may do: bearer tokens (RFC 6750), static or JWT access tokens.

Static tokens (PLANTS_API_TOKENS, PLANTS_READ_TOKENS) and, when PLANTS_JWT_ISSUER is set, JWT
access tokens from an identity provider (RFC 9068) work side by side: a token that is not one of
the static ones and looks like a JWS is verified as an access token.
"""

from __future__ import annotations

from collections.abc import Callable

from app.auth.access_tokens import AccessTokens
from app.auth.caller import Authentication, Caller
from app.auth.jwks import KeySet
from app.auth.static import READ_ONLY_TOKEN, TICKET_AS_TOKEN, TOKEN_NOT_ACCEPTED, StaticTokens, bearer_token
from app.auth.watch_tickets import PREFIX as TICKET_PREFIX
from app.auth.watch_tickets import WatchTickets
from app.settings import JwtSettings, Settings

__all__ = ["READ_ONLY_TOKEN", "Authentication", "Authenticator", "Caller", "JwtSettings", "authenticator_for"]


class Authenticator:
    """One application's accepted tokens."""

    def __init__(
        self, static: StaticTokens, access_tokens: AccessTokens | None, ticket_ttl: int = 60
    ) -> None:
        self.static = static
        self.access_tokens = access_tokens
        #: Watch tickets, for `GET /events` only (app/auth/watch_tickets.py).
        self.tickets = WatchTickets(static, ticket_ttl, jwt=access_tokens is not None)

    def authenticate(self, header: str | None) -> Authentication:
        """The caller of an Authorization header value, or why it is refused."""
        problem, token = bearer_token(header)
        if problem is not None:
            return problem, None
        caller = self.static.caller(token)
        if caller is not None:
            return None, caller
        if self.access_tokens is not None and token.count(".") == 2:
            return self.access_tokens.verify(token)
        return (TICKET_AS_TOKEN if token.startswith(TICKET_PREFIX) else TOKEN_NOT_ACCEPTED), None

    def holding(self, header: str | None) -> Callable[[], bool] | None:
        """For a watch: whether the JWT of an Authorization header value it was let in by still
        verifies (AccessTokens.holding); None for any other caller (a static token lasts as long
        as the worker that read it, a watch ticket until its expiry)."""
        problem, token = bearer_token(header)
        if problem is not None or self.access_tokens is None or self.static.caller(token) is not None:
            return None
        return self.access_tokens.holding(token)

    def close(self) -> None:
        """Stop loading the provider's keys in the background, for an app no longer served."""
        if self.access_tokens is not None:
            self.access_tokens.keys.close()

    @property
    def ready(self) -> bool:
        """False until the provider's keys were loaded once (always True without JWT)."""
        return self.access_tokens is None or self.access_tokens.keys.loaded


def authenticator_for(settings: Settings) -> Authenticator:
    """The accepted tokens of `settings`."""
    jwt, tokens = settings.jwt, settings.tokens
    access_tokens = None
    if jwt is not None:
        keys = KeySet(discovery_url=jwt.discovery_url, jwks_url=jwt.jwks_url, issuer=jwt.issuer)
        keys.start()
        access_tokens = AccessTokens(jwt, keys)
    return Authenticator(
        StaticTokens(tokens.full, tokens.read_only), access_tokens, settings.watch_ticket_ttl
    )
