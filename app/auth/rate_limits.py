"""Rate limits for the plants blueprint, on the `limits` library (the engine under Flask-Limiter).

Two limits, each off until set, each on the blueprint's routes only:

- `PLANTS_RATE_LIMIT`: requests per token to the four plant operations, reads included (a token
  may carry its own, `token@limit`). Keyed by a fingerprint of the token, so no token is ever
  written to the limit store; a JWT access token counts under its issuer and subject, so a
  client's fresh tokens share one budget.
- `PLANTS_AUTH_FAILURE_LIMIT`: refused authentications per client address (after ProxyFix and
  app/http/client_address.py); an IPv6 client's per /64, which one client holds whole
  (`client_key`), and per /48 too (`PLANTS_AUTH_FAILURE_LIMIT_PER_48`, by default four times the
  /64's), since one site commonly holds a whole /48 and with it 65,536 /64s.

The addresses counted are bounded: at most `MAX_ADDRESSES` keys per process are opened in a
window (address_keys.py); past that, a new address shares one budget with every other newcomer.

The counters live where the plants live: a per-app memory storage with the memory store, the same
Redis (keys under `<prefix>:limits`) with the Redis store, so a limit holds across workers and
hosts. Each is a fixed window: one counter per key and window, one INCR per request.

Why not Flask-Limiter itself: measured side by side (bench/README.md), its per-request machinery
(limit resolution, exemption scopes, per-request parsing, a second storage read for headers)
cost a create about as much as the rest of the request, against a goal of at most a tenth. The
checks here are the bearer hook's own, after authentication, so they need no second look at the
token, and they never touch a host's own Flask-Limiter.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from flask import Response
from limits.errors import StorageError

from app.auth.address_keys import AddressKeys, client_key, wide_key
from app.errors import RateLimitExceeded
from app.settings import Settings
from app.store import FAILURES, RenewingPool, StoreUrl, backend_error, renewed_after_read_only

log = logging.getLogger(__name__)

#: Token keys and window ends remembered per process, at most.
MAX_REMEMBERED_KEYS = 100_000
#: Client addresses (or /64s and /48s) counted per process within a window, at most.
MAX_ADDRESSES = 10_000
#: The /48's budget when PLANTS_AUTH_FAILURE_LIMIT_PER_48 is unset: this many /64s' worth.
WIDE_FACTOR = 4
#: Seconds between two warnings that requests went uncounted (Redis at maxmemory): a line per
#: request would double the log for as long as Redis stays full.
UNCOUNTED_WARNING_S = 60.0


class LimitState(NamedTuple):
    """The limit a request met: for its headers."""

    amount: int
    remaining: int
    reset_seconds: int


def limit_headers(state: LimitState, *, refused: bool = False) -> list[tuple[str, str]]:
    """RateLimit-Limit, -Remaining and -Reset (seconds, as the IETF draft), and Retry-After on a 429."""
    headers = [
        ("RateLimit-Limit", str(state.amount)),
        ("RateLimit-Remaining", str(state.remaining)),
        ("RateLimit-Reset", str(state.reset_seconds)),
    ]
    if refused:
        headers.append(("Retry-After", str(max(state.reset_seconds, 1))))
    return headers


def _store_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method`, raising the store's StoreUnavailableError for a failure of the limits' storage."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except StorageError as exc:
            raise backend_error(exc.storage_error, "rate limits") from None

    return call


class RateLimits:
    """One application's limit store and its two limits."""

    def __init__(
        self,
        *,
        storage_uri: str,
        storage_options: Mapping[str, Any],
        key_prefix: str,
        per_token: str | None,
        token_overrides: Mapping[str, str],
        auth_failures: str | None,
        auth_failures_wide: str | None = None,
    ) -> None:
        from limits import parse_many
        from limits.storage import storage_from_string
        from limits.strategies import FixedWindowRateLimiter

        options = dict(storage_options)
        if not storage_uri.startswith("memory"):
            # Redis faults come out as limits' StorageError, which the blueprint answers with 503.
            options.update(wrap_exceptions=True, key_prefix=key_prefix)
        # The fixed-window strategy's storage, used directly: its INCR answers the count, so one
        # more read (the window's expiry) gives every header, where hit() and get_window_stats()
        # would take three.
        self._connect = lambda: FixedWindowRateLimiter(storage_from_string(storage_uri, **options)).storage
        # `limits`' cluster storage reaches the cluster as it is made (one Redis's waits for its
        # first command): a cluster down at the start must not stop it. Each count tries again,
        # a 503 meanwhile, as the plants' own operations are.
        self._storage: Any = None
        with contextlib.suppress(*FAILURES):
            self._storage = self._connect()
        self._per_token = parse_many(per_token) if per_token else []
        self._overrides = {
            token.encode("ascii"): parse_many(limit) for token, limit in token_overrides.items()
        }
        self._auth_failures = parse_many(auth_failures) if auth_failures else []
        self._auth_failures_wide = _wide_limits(self._auth_failures, auth_failures_wide)
        windows = [limit.get_expiry() for limit in self._auth_failures + self._auth_failures_wide]
        # The addresses counted, bounded (address_keys.py); their windows' ends are not cached.
        self._addresses = AddressKeys(MAX_ADDRESSES, max(windows, default=1))
        # When each token's current window ends, as far as this process knows: the window's
        # expiry is read from the store once per window, not on every create. Bounded by the
        # configured tokens and their limits.
        self._window_ends: dict[str, float] = {}
        # Each accepted token's key in the limit store, hashed once: the tokens are a fixed set.
        self._token_keys: dict[bytes, str] = {}
        # Requests let through uncounted since the last warning, and when that was.
        self._uncounted, self._warned_at = 0, -math.inf

    @_store_errors
    def check_token(self, token: bytes) -> LimitState | None:
        """Count a request by `token` (a static token, or a JWT's subject key); raise
        RateLimitExceeded past its limit."""
        limits = self._overrides.get(token, self._per_token)
        if not limits:
            return None
        key = self._token_keys.get(token)
        if key is None:
            if len(self._token_keys) >= MAX_REMEMBERED_KEYS:
                # JWT subjects are not a fixed set: forget, rather than grow without bound.
                self._token_keys.clear()
                self._window_ends.clear()
            key = self._token_keys[token] = "token:" + hashlib.sha256(token).hexdigest()[:24]
        message = "Too many requests for this token; retry after Retry-After seconds."
        return self._hit(limits, key, message, self._window_ends)

    @_store_errors
    def check_auth_failure(self, address: str | None) -> LimitState | None:
        """Count a refused authentication from `address`; raise RateLimitExceeded past the limit."""
        if not self._auth_failures:
            return None
        message = "Too many failed authentications from this address; retry later."
        now, narrow_key, wide = time.time(), "address:" + client_key(address), wide_key(address)
        if wide is None:
            return self._hit(self._auth_failures, self._addresses.key(narrow_key, now), message)
        network = (self._auth_failures_wide, self._addresses.key("network:" + wide, now))
        wide_message = "Too many failed authentications from this address's network (its /48); retry later."
        # A spent /48 is refused before its /64 is counted: each /64 it invents (it holds 65,536)
        # would open a counter of its own, up to the bound past which every newcomer shares one.
        opened = self._addresses.opened(narrow_key, now)
        counted = None if opened is None else (self._auth_failures, opened)
        _refuse_if_spent(self._reached(), network, counted, wide_message)
        narrow = (self._auth_failures, self._addresses.key(narrow_key, now))
        state = self._hit(*narrow, message)
        wider = self._hit(*network, wide_message, also=narrow)
        return wider if wider.remaining < state.remaining else state

    def _reached(self) -> Any:
        """The storage: made when the app was, or reached now if the cluster was down then."""
        return self._storage if self._storage is not None else self._connected()

    def _connected(self) -> Any:
        """The storage, reached now: the cluster was down when the app was made."""
        try:
            self._storage = self._connect()
        except FAILURES as exc:
            raise backend_error(exc, "rate limits") from None
        return self._storage

    def uncounted(self) -> None:
        """A request went on uncounted, as Redis is full (maxmemory): a warning, once a minute at most."""
        self._uncounted += 1
        now = time.monotonic()
        if now - self._warned_at >= UNCOUNTED_WARNING_S:
            self._warned_at, count, self._uncounted = now, self._uncounted, 0
            log.warning(
                "Rate limits: Redis is full (maxmemory), so %d request(s) went on uncounted since the"
                " last such warning (written once a minute at most)",
                count,
            )

    @property
    def counters(self) -> Any:
        """The `limits` storage the counts are kept in (None while a cluster is unreachable)."""
        return self._storage

    @property
    def open_addresses(self) -> int:
        """How many address keys this process counts in their windows (at most MAX_ADDRESSES)."""
        return len(self._addresses)

    def _hit(
        self,
        limits: list[Any],
        key: str,
        message: str,
        window_ends: dict[str, float] | None = None,
        also: tuple[list[Any], str] | None = None,
    ) -> LimitState:
        # Every limit of the list is counted up to the first that refuses; the tightest one is
        # reported, or on a refusal the spent window that ends last (_refusal), of these limits or
        # of `also`'s (a /48's /64, read, not counted).
        storage = self._reached()
        tightest = None
        for index, limit in enumerate(limits):
            window_key = limit.key_for(key)
            now = time.time()
            count = _counted(storage, window_key, limit.get_expiry())
            reset_at = None if window_ends is None else window_ends.get(window_key)
            if count == 1:  # this request opened the window
                reset_at = now + limit.get_expiry()
            state = _state(storage, limit, window_key, count, reset_at, window_ends, now)
            if count > limit.amount:
                spent = _spent(storage, limits, index, key, window_ends)
                if also is not None:
                    spent += _spent(storage, also[0], -1, also[1], None)
                raise _refusal(message, state, spent)
            if tightest is None or state.remaining < tightest.remaining:
                tightest = state
        assert tightest is not None
        return tightest


def _counted(storage: Any, window_key: str, expiry: int) -> int:
    """The window's count, one more. After a failover behind the store URL's name, a count that
    met the old primary (a replica now: READONLY, nothing counted) is sent once more, on a
    connection made after the renewal (the storage's pool is a RenewingPool,
    app/store/redis/renewal.py), as the store's writes are: READONLY again only while the name
    still names a replica."""
    try:
        return int(storage.incr(window_key, expiry))
    except StorageError as exc:
        if not renewed_after_read_only(exc.storage_error, storage.get_connection()):
            raise
    return int(storage.incr(window_key, expiry))


def _state(
    storage: Any,
    limit: Any,
    window_key: str,
    count: int,
    reset_at: float | None,
    window_ends: dict[str, float] | None,
    now: float,
) -> LimitState:
    """`limit`'s state at `count` (read or counted at `now`), its window ending at `reset_at`, or
    as `window_ends` (a cache, or None) or else the storage says."""
    if reset_at is None and window_ends is not None:
        reset_at = window_ends.get(window_key)
    if reset_at is None or reset_at <= now:
        reset_at = storage.get_expiry(window_key)
    if window_ends is not None:
        window_ends[window_key] = reset_at
    # From the clock now, not before the round trips: the end read from Redis is its TTL (whole
    # seconds) added to the time it answered, and counted from before the INCR it came out a
    # second past the window's end whenever that took any time at all.
    seconds = max(0, math.ceil(reset_at - time.time()))
    return LimitState(limit.amount, max(0, limit.amount - count), seconds)


def _spent(
    storage: Any, limits: list[Any], refusing: int, key: str, window_ends: dict[str, float] | None
) -> list[LimitState]:
    """The states of `limits` other than the `refusing` one (-1: none) whose windows have no request left,
    their counts read, not counted."""
    spent = []
    for index, limit in enumerate(limits):
        window_key = limit.key_for(key)
        if index != refusing and (count := storage.get(window_key)) >= limit.amount:
            spent.append(_state(storage, limit, window_key, count, None, window_ends, time.time()))
    return spent


def _refuse_if_spent(
    storage: Any, network: tuple[list[Any], str], narrow: tuple[list[Any], str] | None, message: str
) -> None:
    """Raise `network`'s 429 when a window of it is spent, counting nothing. Its Retry-After is
    the spent window that ends last, `narrow`'s too (a /64's open key): a client told to wait
    only for its /48's minute, with its /64's hour spent, would be refused again."""
    spent = _spent(storage, network[0], -1, network[1], None)
    if spent:
        if narrow is not None:
            spent += _spent(storage, narrow[0], -1, narrow[1], None)
        raise _refusal(message, spent[0], spent[1:])


def _refusal(message: str, state: LimitState, spent: list[LimitState]) -> RateLimitExceeded:
    """The 429 of a request `state`'s limit refuses: its headers those of the spent window that
    ends last, `state`'s or one of the others `spent`. A client told to wait only for the
    shortest (a minute's, with an hour's also spent) would be refused again."""
    longest = max([state, *spent], key=lambda each: each.reset_seconds)
    return RateLimitExceeded(message, limit_headers(longest, refused=True))


_STATE = "plants.rate_limit"


def remember(environ: dict[str, Any], state: LimitState | None) -> None:
    if state is not None:
        environ[_STATE] = state


def add_headers(environ: Mapping[str, Any], response: Response) -> None:
    """after_request: the headers of the limit this request met and passed."""
    state = environ.get(_STATE)
    if state is not None and response.status_code != 429:
        response.headers.extend(limit_headers(state))


def rate_limits_for(settings: Settings, url: StoreUrl) -> RateLimits | None:
    """The app's rate limits, kept beside its plants (memory, or the same Redis); None when off."""
    per_token, own, failures = settings.rate_limit, settings.tokens.limits, settings.auth_failure_limit
    if not (per_token or own or failures):
        return None
    return RateLimits(
        storage_uri=_storage_uri(url),
        storage_options=_storage_options(url, settings),
        key_prefix=f"{settings.store_prefix}:limits",
        per_token=per_token,
        token_overrides=own,
        auth_failures=failures,
        auth_failures_wide=settings.auth_failure_limit_per_48,
    )


def _wide_limits(narrow: list[Any], wide: str | None) -> list[Any]:
    """The /48's limits: as set, or each /64 limit's amount `WIDE_FACTOR` times over its window."""
    from limits import RateLimitItem, parse_many

    if wide:
        return parse_many(wide)
    return [
        type(limit)(limit.amount * WIDE_FACTOR, limit.multiples, limit.namespace)
        for limit in narrow
        if isinstance(limit, RateLimitItem)
    ]


def _storage_uri(url: StoreUrl) -> str:
    """The `limits` storage for a store URL: memory for memory, the same Redis (or cluster) for Redis."""
    if url.scheme == "unix":
        return "redis+unix:" + url.url.split(":", 1)[1]
    if url.cluster:
        # Its nodes alone, as the store read them: the user and password are options
        # (_storage_options), so that `limits`, which quotes a URI it cannot parse, never has them.
        # No TLS scheme for a cluster there: the option `ssl`, and the URL's ssl_* options as
        # options too, which its cluster storage does not read from a query.
        return "redis+cluster://" + ",".join(url.addresses)
    return url.url if url.shared else "memory://"


def _storage_options(url: StoreUrl, settings: Settings) -> dict[str, Any]:
    """The `limits` storage's options for a store URL: the store's timeouts, and TLS; on a single
    Redis, its pool (made with them), one that follows a failover behind the URL's name."""
    if not url.shared:
        return {}
    options: dict[str, Any] = {
        "socket_timeout": settings.store_timeout,
        "socket_connect_timeout": settings.store_connect_timeout,
    }
    if not url.cluster:
        options["connection_pool"] = RenewingPool.from_url(url.url, **options)
    if url.cluster:
        options.update({"username": url.username, "password": url.password})
    if url.scheme == "rediss+cluster":
        options.update(url.tls_options, ssl=True)
    return options
