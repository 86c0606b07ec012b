"""Watch tickets: a short-lived, read-only credential for watching the feed from a URL.

A browser's EventSource cannot send an `Authorization` header, and a bearer token must never sit
in a URL (URLs end up in logs and histories). So a client with a token that may read mints a
ticket (`POST /events/tickets`), and passes it as `GET /events?ticket=...`: the one operation
that accepts it, and only to watch (a stream or a long-poll).

A ticket is `plwt_` and base64url (no padding) of: a version byte, its expiry (4 bytes, Unix
seconds), what it is bound to, and the first 16 bytes of an HMAC-SHA256 over all that with the
store's cursor key (app/http/cursor.py signs cursors with it too, in another domain), so every
worker and host that shares the store accepts it. It is bound to its token without holding it:

- a static token: a fingerprint of it (an HMAC with the same key, so that a leaked ticket is no
  offline test of guesses at its token), looked up among the tokens configured now, so a ticket
  dies with its token's removal or rotation;
- a JWT: the hash of its issuer and subject (its rate-limit key), and it expires no later than the
  JWT's own `exp`.

It serves until it expires, not once: an EventSource reconnects with the same URL. It counts
against its token's rate limit and watcher cap (the same key). The prefix lets logs scrub any
ticket they would show (app/telemetry/logs.py, app/server/access_log.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import struct
import time
from collections.abc import Callable

from app.auth.caller import Authentication, Caller
from app.auth.static import StaticTokens
from app.errors import InsufficientScope, InvalidToken
from app.telemetry.redact import TICKET_PREFIX

#: The environ key of the caller an accepted ticket stands for.
TICKET_CALLER = "plants.watch_ticket"
#: Every ticket starts with it: logs scrub it out (app/telemetry/redact.py).
PREFIX = TICKET_PREFIX
_VERSION = b"\x01"
_STATIC, _JWT = b"s", b"j"
_MAC_BYTES = 16
_BINDING_BYTES = {_STATIC: 16, _JWT: 32}
_JWT_KEY_PREFIX = b"jwt:"

NOT_A_TICKET = InvalidToken("The watch ticket is not one this service made.", reason="ticket_invalid")
EXPIRED = InvalidToken(
    "The watch ticket has expired: mint another (POST /events/tickets).", reason="ticket_expired"
)
TOKEN_GONE = InvalidToken(
    "The watch ticket's token is no longer accepted: mint another with a current token.",
    reason="ticket_token_gone",
)
WATCH_ONLY = InsufficientScope(
    "A watch ticket serves only GET /events as a stream (Accept: text/event-stream) or a long-poll (wait).",
    reason="ticket_watch_only",
)


def _fingerprint(key: bytes, token: bytes) -> bytes:
    digest = hmac.new(key, b"watch-ticket-token\x1f" + token, hashlib.sha256).digest()
    return digest[: _BINDING_BYTES[_STATIC]]


def _mac(key: bytes, payload: bytes) -> bytes:
    # Its own domain: a cursor's MAC (over "v2\x1f" and its payload) is never a ticket's.
    return hmac.new(key, b"watch-ticket\x1f" + payload, hashlib.sha256).digest()[:_MAC_BYTES]


class WatchTickets:
    """Mints and checks one application's tickets."""

    def __init__(
        self, static: StaticTokens, ttl: int, *, jwt: bool, clock: Callable[[], float] = time.time
    ) -> None:
        self.ttl, self._jwt, self._clock = ttl, jwt, clock
        self._callers = static.callers
        #: The static tokens configured now, by fingerprint under the store's key (one key per
        #: store, so one entry): a removed token's tickets find none.
        self._static: dict[bytes, dict[bytes, Caller]] = {}

    def expiry(self, caller: Caller, now: float) -> int:
        """When a ticket minted for `caller` at `now` expires: a whole second (its 4 bytes), no
        later than the caller's own authority (a JWT's `exp`, which may be a fraction)."""
        return math.floor(min(now + self.ttl, caller.expires))

    def mint(self, caller: Caller, key: bytes, now: float | None = None) -> tuple[str, int]:
        """A ticket for `caller` (a static token's or a JWT's), and its expiry in Unix seconds."""
        now = self._clock() if now is None else now
        expires = self.expiry(caller, now)
        if caller.kind == "jwt":
            kind, binding = _JWT, bytes.fromhex(caller.limit_key.removeprefix(_JWT_KEY_PREFIX).decode())
        else:
            kind, binding = _STATIC, _fingerprint(key, caller.limit_key)
        payload = _VERSION + struct.pack(">I", expires) + kind + binding
        return PREFIX + base64.urlsafe_b64encode(payload + _mac(key, payload)).rstrip(b"=").decode(), expires

    def verify(
        self, ticket: str, key: bytes | Callable[[], bytes], query: str | None = None
    ) -> Authentication:
        """The read-only caller a ticket stands for, or why it is refused. With `query` (the raw
        query string it came in), only as `ticket=plwt_...` there, never percent-encoded: the logs
        find a ticket by that spelling (app/telemetry/redact.py, deploy/nginx-plants.conf).

        `key` may be a callable (the store's `cursor_key`, which reads the store the first time):
        it is called only for a ticket of the right form that has not expired, so that a client
        without a credential makes the service read nothing for a ticket refused without the key
        (the guard counts the refusal against the auth-failure limit)."""
        if query is not None and "ticket=" + ticket not in query.split("&"):
            return NOT_A_TICKET, None
        raw = self._decode(ticket)
        if raw is None:
            return NOT_A_TICKET, None
        payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        # The expiry first: it needs no key, and an expired ticket is refused whoever made it.
        (expires,) = struct.unpack(">I", payload[1:5])
        if self._clock() >= expires:
            return EXPIRED, None
        if callable(key):
            key = key()
        if not hmac.compare_digest(mac, _mac(key, payload)):
            return NOT_A_TICKET, None
        kind, binding = payload[5:6], payload[6:]
        if kind == _STATIC:
            by_fingerprint = self._static.get(key)
            if by_fingerprint is None:
                by_fingerprint = self._static[key] = {
                    _fingerprint(key, token): caller for token, caller in self._callers.items()
                }
            caller = by_fingerprint.get(binding)
            if caller is None:
                return TOKEN_GONE, None
            limit_key = caller.limit_key
        elif self._jwt:
            limit_key = _JWT_KEY_PREFIX + binding.hex().encode()
        else:  # the provider was turned off since
            return TOKEN_GONE, None
        return None, Caller(limit_key, None, WATCH_ONLY, WATCH_ONLY, "ticket", float(expires))

    @staticmethod
    def _decode(ticket: str) -> bytes | None:
        if not ticket.startswith(PREFIX):
            return None
        text = ticket[len(PREFIX) :]
        try:
            raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
        except (binascii.Error, ValueError):
            return None
        if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != text or len(raw) < 7:
            return None
        kind = raw[5:6]
        if raw[:1] != _VERSION or len(raw) != 6 + _BINDING_BYTES.get(kind, -100) + _MAC_BYTES:
            return None
        return raw
