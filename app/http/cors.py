"""Cross-origin requests (CORS) to the plants blueprint, on Flask-CORS: off until PLANTS_CORS_ORIGINS.

Tokens are bearer headers, never cookies, so no answer allows credentials
(`Access-Control-Allow-Credentials` is never sent): a page's script must hold a token to call,
and `*` (every origin) is therefore as safe as a list, and allowed alone.

Flask-CORS is applied to a blueprint of this module's own, one per application, never registered:
its after-request function (options resolved once, the host's `CORS_*` config never merged in) is
then called by the plants blueprint's own after-request, so an embedding host's CORS, and its
routes, are left alone. A preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered
by the OPTIONS view of its route (app/http/options.py) without a token and without counting
against a rate limit, and allows only the methods that route serves.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from flask import Blueprint, Response
from flask_cors import CORS

#: What clients send: the token, the body's type, preconditions, and the feed's resume position.
ALLOW_HEADERS = ("Authorization", "Content-Type", "If-Match", "If-None-Match", "Last-Event-ID")
#: What clients read: versions, next pages, created plants, when to retry, the request's id, the
#: rate limit (app/auth/rate_limits.py), why a token was refused, the patch type a refused PATCH
#: asks for (its 415's `Accept-Patch`, RFC 5789 §2.2), and a deprecated operation's announcement
#: (app/plants/deprecation.py), which a page must see as any client does.
EXPOSE_HEADERS = (
    "Deprecation",
    "Sunset",
    "ETag",
    "Link",
    "Location",
    "Retry-After",
    "X-Request-Id",
    "RateLimit-Limit",
    "RateLimit-Remaining",
    "RateLimit-Reset",
    "WWW-Authenticate",
    "Accept-Patch",
)
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
#: Seconds a browser may reuse a preflight's answer (Chromium caps it at 7200).
MAX_AGE = 600
WILDCARD = "*"
#: Allowed Origin values whose headers are kept (an allowed origin's case may vary): past them,
#: each answer asks Flask-CORS again, so what a client sends cannot grow what the worker holds.
MOST_ORIGINS = 64
_CORS_HEADER = "Access-Control-"


class Cors:
    """One application's CORS policy for the plants blueprint."""

    def __init__(self, origins: Iterable[str]) -> None:
        origins = tuple(origins)
        wildcard = origins == (WILDCARD,)
        holder = Blueprint("plants_cors", __name__)
        CORS(
            holder,
            resources={r"/*": {}},
            # Exact origins, compared whole and case-insensitively: never read as a pattern (an
            # IPv6 literal's brackets would be one), nor matched by a prefix.
            origins=WILDCARD
            if wildcard
            else [re.compile(re.escape(origin) + r"\Z", re.IGNORECASE) for origin in origins],
            methods=list(METHODS),
            allow_headers=list(ALLOW_HEADERS),
            expose_headers=list(EXPOSE_HEADERS),
            supports_credentials=False,
            max_age=MAX_AGE,
            send_wildcard=wildcard,
            vary_header=False,  # added below, to every answer
            always_send=False,
            automatic_options=False,
            intercept_exceptions=False,
            allow_private_network=False,
        )
        (self._apply,) = holder.after_request_funcs[None]  # Flask-CORS's after-request function
        self.origins = origins
        self._wildcard = wildcard
        self._decided: dict[str, list[tuple[str, str]]] = {}

    def _decide(self, origin: str) -> list[tuple[str, str]]:
        """The headers Flask-CORS adds to an answer (not a preflight's) for `origin`. With these
        options they depend on the origin alone (on nothing, for `*`), so an allowed origin's
        are asked once and kept, up to MOST_ORIGINS: asking at every answer is a large share of a
        create's cost (bench/README.md)."""
        probe = Response()
        self._apply(probe)
        headers = [(name, value) for name, value in probe.headers.items() if name.startswith(_CORS_HEADER)]
        if headers and len(self._decided) < MOST_ORIGINS:
            self._decided[WILDCARD if self._wildcard else origin] = headers
        return headers

    def finish(self, environ: dict[str, Any], response: Response) -> None:
        """Add the CORS headers to an answer of the blueprint, and `Vary: Origin` to every one, so
        that a cache never serves an answer made for one origin (or none) to another."""
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None:
            if environ["REQUEST_METHOD"] == "OPTIONS":
                self._apply(response)  # a preflight's answer depends on what it asks for
                _route_methods_only(response)
            else:
                headers = self._decided.get(WILDCARD if self._wildcard else origin)
                for name, value in self._decide(origin) if headers is None else headers:
                    response.headers.add(name, value)
        # Added, not merged: nothing else in the blueprint sends Vary, and a list-valued field may
        # come as several lines (RFC 9110 §5.3). A scan for an existing one cost 5x as much.
        response.headers.add("Vary", "Origin")


def _route_methods_only(response: Response) -> None:
    """A preflight allows the methods its route serves, as its `Allow` (app/http/options.py) names
    them, not every method of the service: Flask-CORS's list is one for all routes."""
    allow = response.headers.get("Allow")
    if allow is not None and "Access-Control-Allow-Methods" in response.headers:
        methods = [method for method in allow.split(", ") if method != "OPTIONS"]
        response.headers["Access-Control-Allow-Methods"] = ", ".join(methods)
