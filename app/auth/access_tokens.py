"""JWT access tokens (RFC 9068) verified with PyJWT against the provider's keys, and their scopes.

A verified token is cached (an LRU keyed by its SHA-256, never past its `exp`, and dropped when
the keys change), so a client's repeated requests do not each pay a signature check.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jwt
from werkzeug.exceptions import HTTPException

from app.auth.caller import Authentication, Caller
from app.auth.jwks import KeySet
from app.errors import KEYS_NOT_LOADED, InsufficientScope, InvalidToken
from app.settings.jwt import JwtSettings

if TYPE_CHECKING:
    # prometheus_client is imported once an app is built (app/metrics.py): only the type here.
    from app.metrics import Metrics

CACHE_SIZE = 10_000
#: RFC 9068 §4: an access token's `typ`; "JWT" as many providers send; absent is accepted too.
ACCESS_TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt", "jwt"})


def _refusal(reason: str, description: str) -> InvalidToken:
    return InvalidToken(
        f"The bearer token is not accepted: {description}.", reason=reason, error_description=description
    )


# Each says which check failed, and never holds the token or a claim's value.
MALFORMED = _refusal("malformed", "the token is malformed")
WRONG_TYPE = _refusal("wrong_type", "the token is not an access token (typ)")
ALGORITHM_NOT_ALLOWED = _refusal("algorithm_not_allowed", "the signing algorithm is not allowed")
UNKNOWN_KEY = _refusal("unknown_key", "the token names no known signing key")
BAD_SIGNATURE = _refusal("bad_signature", "the signature does not verify")
EXPIRED = _refusal("expired", "the token has expired")
NOT_YET_VALID = _refusal("not_yet_valid", "the token is not yet valid")
WRONG_ISSUER = _refusal("wrong_issuer", "the token is from another issuer")
WRONG_AUDIENCE = _refusal("wrong_audience", "the token is meant for another audience")
MISSING_CLAIM = _refusal("missing_claim", "the token lacks a required claim (exp, iss or aud)")
_DECODE_REFUSALS: list[tuple[type[Exception], InvalidToken]] = [
    (jwt.ExpiredSignatureError, EXPIRED),
    (jwt.ImmatureSignatureError, NOT_YET_VALID),
    (jwt.InvalidIssuerError, WRONG_ISSUER),
    (jwt.InvalidAudienceError, WRONG_AUDIENCE),
    (jwt.MissingRequiredClaimError, MISSING_CLAIM),
    (jwt.InvalidSignatureError, BAD_SIGNATURE),
]


class AccessTokens:
    """Verifies one provider's access tokens and gives each its caller, by its scopes."""

    def __init__(self, settings: JwtSettings, keys: KeySet, clock: Callable[[], float] = time.time) -> None:
        self.settings, self.keys, self._clock = settings, keys, clock
        self._options: Any = {"require": ["exp", "iss", "aud"]}
        self._cache: OrderedDict[bytes, tuple[float, int, Caller]] = OrderedDict()
        self._lock = threading.Lock()
        self._needs_read = InsufficientScope(
            f"This token lacks the scope {settings.read_scope} (or {settings.write_scope}).",
            reason="insufficient_scope",
            scope=settings.read_scope,
        )
        self._needs_write = InsufficientScope(
            f"This token may not create, change or delete: that needs the scope {settings.write_scope}.",
            reason="insufficient_scope",
            scope=settings.write_scope,
        )
        self._needs_webhooks = InsufficientScope(
            f"This token may not manage webhooks: that needs the scope {settings.webhooks_scope}.",
            reason="insufficient_scope",
            scope=settings.webhooks_scope,
        )

    def verify(self, token: str, refetch: bool = True) -> Authentication:
        """The caller of a valid token, or why it is refused (`refetch`: KeySet.find's)."""
        digest = hashlib.sha256(token.encode("ascii")).digest()
        now = self._clock()
        with self._lock:
            cached = self._cache.get(digest)
            if cached is not None and cached[0] > now and cached[1] == self.keys.generation:
                self._cache.move_to_end(digest)
                return None, cached[2]
        if not self.keys.loaded:
            return KEYS_NOT_LOADED, None
        generation = self.keys.generation
        problem, claims = self._check(token, refetch)
        if problem is not None:
            return problem, None
        caller = self._caller(claims, digest)
        with self._lock:
            self._cache[digest] = (float(claims["exp"]), generation, caller)
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return None, caller

    def holding(self, token: str) -> Callable[[], bool]:
        """Whether `token`, verified now, still verifies: asked by its watch at each step, and
        checked again only once the provider's keys have changed, without fetching them (a key
        withdrawn ends the watches its tokens opened, as it refuses their requests)."""
        keys = self.keys
        checked = [keys.generation]

        def holds() -> bool:
            generation = keys.generation
            if generation == checked[0]:
                return True
            if self.verify(token, refetch=False)[0] is not None:
                return False
            checked[0] = generation
            return True

        return holds

    def _check(self, token: str, refetch: bool = True) -> tuple[HTTPException | None, dict[str, Any]]:
        if "=" in token:
            # RFC 7515 §2: base64url without padding. PyJWT reads a padded signature as the same
            # one: one token spelled two ways would be two to the cache and a subjectless budget.
            return MALFORMED, {}
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            return MALFORMED, {}
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in self.settings.algorithms:
            return ALGORITHM_NOT_ALLOWED, {}
        typ = header.get("typ")
        if typ is not None and (not isinstance(typ, str) or typ.lower() not in ACCESS_TOKEN_TYPES):
            return WRONG_TYPE, {}
        key, known = self.keys.find(header.get("kid"), algorithm, refetch)
        if key is None:
            # A known kid whose key does not fit the algorithm (an RSA key for ES256, say).
            return (ALGORITHM_NOT_ALLOWED if known and "kid" in header else UNKNOWN_KEY), {}
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=self.settings.audience,
                issuer=self.settings.issuer,
                leeway=self.settings.leeway,
                options=self._options,
            )
        except jwt.InvalidTokenError as exc:
            refusal = next(
                (refusal for kind, refusal in _DECODE_REFUSALS if isinstance(exc, kind)), MALFORMED
            )
            return refusal, {}
        if not _numeric_date(claims["exp"]) or any(
            name in claims and not _numeric_date(claims[name]) for name in ("nbf", "iat")
        ):
            return MALFORMED, {}
        return None, claims

    def _caller(self, claims: dict[str, Any], digest: bytes) -> Caller:
        scopes = _scopes(claims)
        # Without a subject, the token is its own: one shared budget would let one client use
        # up every other subjectless client's.
        subject = claims.get("sub") or claims.get("client_id") or "token:" + digest.hex()
        # A JSON string may hold a lone surrogate escape (`"\\ud800"`), which strict UTF-8 refuses.
        subject = f"{claims.get('iss')}\0{subject}".encode("utf-8", "surrogatepass")
        write = self.settings.write_scope in scopes
        read = write or self.settings.read_scope in scopes
        return Caller(
            b"jwt:" + hashlib.sha256(subject).hexdigest().encode(),
            None if read else self._needs_read,
            None if write else self._needs_write,
            None if self.settings.webhooks_scope in scopes else self._needs_webhooks,
            "jwt",
            float(claims["exp"]),
        )


def lapsed(caller: Caller, metrics: Metrics | None) -> InvalidToken | None:
    """The refusal (401) of a caller let in though its authority has ended: a JWT past its `exp`
    within the leeway (PLANTS_JWT_LEEWAY). What that authority bounds, a watch of the feed or a
    watch ticket, would end before it began: answered an empty watch, a client asks again at once
    with the same token, for as long as the leeway lasts; told that the token has expired, it
    fetches a fresh one. None when its authority holds; counted in `metrics` when it has ended.
    The view answers it (app/http/error_handler.py): who is let in is decided here, not answered."""
    if caller.expires > time.time():
        return None
    if metrics is not None:
        metrics.count_refusal(EXPIRED.reason)
    return EXPIRED


def _numeric_date(value: Any) -> bool:
    """Whether `value` is a NumericDate (RFC 7519 §2: a JSON number) a float holds. PyJWT reads
    `exp`, `nbf` and `iat` with int(), so it takes the string "1700000000" and `true` as times
    too; and it takes an integer `exp` of any size, and one past a float's range would fail the
    cache and the watches' deadline (float) as an error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _scopes(claims: dict[str, Any]) -> frozenset[str]:
    """`scope` (RFC 9068 §2.2.3: a space-separated string) or `scp` (an array, or such a string)."""
    scopes: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            scopes.update(value.split())
        elif isinstance(value, list):
            scopes.update(item for item in value if isinstance(item, str))
    return frozenset(scopes)
