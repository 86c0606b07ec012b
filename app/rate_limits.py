"""Rate limits for the plants blueprint, through Flask-Limiter (on the `limits` library).

Two limits, each off until set, each on the blueprint's routes only:

- `PLANTS_RATE_LIMIT`: creates per token (a token may carry its own, `token@limit`). Keyed by
  a fingerprint of the token, so no token is ever written to the limit store.
- `PLANTS_AUTH_FAILURE_LIMIT`: refused authentications per client address (after ProxyFix).

The counters live where the plants live: a per-app memory storage with the memory store, the same
Redis (keys under `<prefix>:limits`) with the Redis store, so a limit holds across workers and
hosts. Flask-Limiter checks its limits in an app-level before_request hook, which runs before the
blueprint's bearer hook; both share one authentication per request (auth.authenticate).

This module's limiter is the app's own instance: a host's Flask-Limiter keeps its limiter and
limits, and defaults from the host's RATELIMIT_* settings are not applied by this one.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

from flask import Blueprint, Flask, Response, request

from .auth import authenticate, is_public


def _always() -> bool:
    return True


class RateLimits:
    """One application's limiter and the blueprint's two limits."""

    def __init__(
        self,
        app: Flask,
        blueprint: Blueprint,
        *,
        storage_uri: str,
        storage_options: Mapping[str, Any],
        key_prefix: str,
        per_token: str | None,
        token_overrides: Mapping[str, str],
        auth_failures: str | None,
        public_views: frozenset[str],
    ) -> None:
        from flask_limiter import Limiter

        self.limiter = Limiter(
            key_func=_client_address,
            storage_uri=storage_uri,
            storage_options=dict(storage_options),
            strategy="fixed-window",  # one counter per key and window: one INCR
            key_prefix=key_prefix,
            headers_enabled=False,  # written by add_headers, with the IETF names
            swallow_errors=False,  # a storage fault is a 503, not a silent pass
            default_limits_exempt_when=_always,
            application_limits_exempt_when=_always,
        )
        self.limiter.init_app(app)
        self._public_views = public_views
        self._per_token = per_token or ""
        self._overrides = {token.encode("ascii"): limit for token, limit in token_overrides.items()}
        if per_token or token_overrides:
            self.limiter.limit(
                self._token_limit,
                key_func=self._token_key,
                exempt_when=self._not_an_accepted_create,
                error_message="Too many creates for this token; retry after the time in Retry-After.",
            )(blueprint)
        if auth_failures:
            self.limiter.limit(
                auth_failures,
                key_func=_client_address,
                exempt_when=self._not_an_auth_failure,
                error_message="Too many failed authentications from this address; retry later.",
            )(blueprint)

    def _token_limit(self) -> str:
        _, token = authenticate()
        return self._overrides.get(token, self._per_token) if token else self._per_token

    @staticmethod
    def _token_key() -> str:
        _, token = authenticate()
        return "token:" + hashlib.sha256(token or b"").hexdigest()[:24]

    def _not_an_accepted_create(self) -> bool:
        rule = request.url_rule
        if request.method != "POST" or rule is None or not rule.endpoint.endswith("create_plant"):
            return True
        problem, _ = authenticate()
        return problem is not None

    def _not_an_auth_failure(self) -> bool:
        if is_public(self._public_views):
            return True
        problem, _ = authenticate()
        return problem is None

    def add_headers(self, response: Response) -> Response:
        """RateLimit-Limit, -Remaining and -Reset (seconds) for the limit this request met;
        Retry-After on a 429."""
        limit = self.limiter.current_limit
        if limit is None:
            return response
        try:
            remaining, reset_at = limit.remaining, limit.reset_at
        except Exception:  # the limit store stopped answering after the check: no headers
            return response
        reset = max(0, reset_at - int(time.time()))
        response.headers["RateLimit-Limit"] = str(limit.limit.amount)
        response.headers["RateLimit-Remaining"] = str(remaining)
        response.headers["RateLimit-Reset"] = str(reset)
        if response.status_code == 429:
            response.headers["Retry-After"] = str(max(reset, 1))
        return response


def _client_address() -> str:
    return "address:" + (request.remote_addr or "-")


def limits_storage_uri(store_url: str) -> str:
    """The `limits` storage for a store URL: memory for memory, the same Redis for Redis."""
    if store_url.startswith("unix:"):
        return "redis+unix:" + store_url.removeprefix("unix:")
    if store_url.startswith(("redis:", "rediss:")):
        return store_url
    return "memory://"
