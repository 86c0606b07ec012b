"""Every request's id, in its answer's `X-Request-Id` and in each of its log lines.

The id is the request's own `X-Request-Id` when a trusted proxy sent it (PLANTS_TRUSTED_PROXIES:
the shipped nginx configuration sets nginx's `$request_id`) and it is 1 to 128 of
`[A-Za-z0-9._:-]`; otherwise a new one, 32 random hex digits. With no trusted proxy, the first
request that comes with `X-Forwarded-*` headers logs one warning naming the setting: links and
client addresses would be the proxy's. With more trusted proxies than the first forwarded
request's `X-Forwarded-For` names addresses, it warns too: ProxyFix then ignores the header, so
every client is the nearest proxy's address, and one client's failed logins hold back every
other's. Behind trusted proxies, the first request that comes with RFC 7239's `Forwarded` and no
`X-Forwarded-*` warns too: only those are read, so a proxy that sends nothing else is not heard.

The same middleware, the outermost of the standalone app, gives every answer
`X-Content-Type-Options: nosniff` (OWASP's REST guidance): a browser never reads a JSON answer, which
can quote what a client sent, as a page. Here it costs one list append, where a hook of Flask's
would cost a request a call and a header check.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable, Iterable
from typing import Any

from app.telemetry.context import REQUEST_ID
from app.telemetry.logs import request_fields

log = logging.getLogger(__name__)

VALID = re.compile(r"[A-Za-z0-9._:-]{1,128}").fullmatch
#: The one header every answer carries; the views that answer a browser's documents (the API page,
#: the interface document, the metrics) send it themselves from here, for a host that embeds the
#: blueprint without this middleware.
NOSNIFF = ("X-Content-Type-Options", "nosniff")
_FORWARDED = (
    "HTTP_X_FORWARDED_FOR",
    "HTTP_X_FORWARDED_PROTO",
    "HTTP_X_FORWARDED_HOST",
    "HTTP_X_FORWARDED_PORT",
    "HTTP_X_FORWARDED_PREFIX",
)


class RequestIds:
    """WSGI middleware, outside everything else of the app (ProxyFix included)."""

    def __init__(self, app: Callable[..., Iterable[bytes]], *, trusted_proxies: int) -> None:
        self.app = app
        self.trusted = trusted_proxies > 0
        self._warn = not self.trusted
        self._proxies = trusted_proxies
        self._warn_fewer = trusted_proxies > 1  # one proxy always names one address, or none
        # Only behind trusted proxies: with none, a request costs no look-up more (the setting's
        # own warning above, on X-Forwarded-*, is the one that applies first).
        self._warn_forwarded = self.trusted

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request_id = environ.get("HTTP_X_REQUEST_ID") if self.trusted else None
        if request_id is None or not VALID(request_id):
            # Unique, not secret: the random module's generator (reseeded in each forked
            # process) costs a request less than os.urandom.
            request_id = f"{random.getrandbits(128):032x}"
        environ[REQUEST_ID] = request_id
        # A proxy sets X-Forwarded-For, or at least -Proto: two look-ups while the warning is due.
        if self._warn and ("HTTP_X_FORWARDED_FOR" in environ or "HTTP_X_FORWARDED_PROTO" in environ):
            self._warn_once(environ)
        if self._warn_fewer and "HTTP_X_FORWARDED_FOR" in environ:
            self._check_proxies(environ)
        if self._warn_forwarded and "HTTP_FORWARDED" in environ:
            self._check_forwarded(environ)

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            headers.append(("X-Request-Id", request_id))
            if NOSNIFF not in headers:  # the API page, the document and the metrics send it themselves
                headers.append(NOSNIFF)
            return start_response(status, headers, exc_info)

        return self.app(environ, start)

    def _warn_once(self, environ: dict[str, Any]) -> None:
        self._warn = False
        sent = [name[5:].replace("_", "-").title() for name in _FORWARDED if name in environ]
        log.warning(
            "A request came with %s, but PLANTS_TRUSTED_PROXIES is 0, so they are ignored: links"
            " (Link, Location) and client addresses are the proxy's. Behind one proxy (the shipped"
            " nginx configuration), set PLANTS_TRUSTED_PROXIES=1. (Said once per worker.)",
            ", ".join(sent),
            extra=request_fields(environ),
        )

    def _check_proxies(self, environ: dict[str, Any]) -> None:
        # The first request with the header decides, once per worker: one without it (a probe
        # that reaches gunicorn directly) says nothing about the proxies. Counted as
        # app/http/client_address.py counts them, by commas (a client's lone quote swallows none).
        self._warn_fewer = False
        named = sum(1 for entry in environ["HTTP_X_FORWARDED_FOR"].split(",") if entry.strip())
        if named >= self._proxies:
            return
        log.warning(
            "A request came with X-Forwarded-For naming %d address(es), but PLANTS_TRUSTED_PROXIES"
            " is %d, so it is ignored: links (Link, Location) and client addresses are the nearest"
            " proxy's, and one client's failed logins (PLANTS_AUTH_FAILURE_LIMIT) count against"
            " every other's. Set PLANTS_TRUSTED_PROXIES to the number of proxies in front (1"
            " behind the shipped nginx configuration, which replaces X-Forwarded-For with the"
            " address it sees). (Said once per worker.)",
            named,
            self._proxies,
            extra=request_fields(environ),
        )

    def _check_forwarded(self, environ: dict[str, Any]) -> None:
        # The first request with `Forwarded` decides, once per worker: a proxy that sends
        # X-Forwarded-* beside it is read, whatever else it sends.
        self._warn_forwarded = False
        if any(name in environ for name in _FORWARDED):
            return
        log.warning(
            "A request came with Forwarded (RFC 7239) and no X-Forwarded-* header, but this service"
            " reads only X-Forwarded-For, -Proto, -Host, -Port and -Prefix (PLANTS_TRUSTED_PROXIES"
            " is %d), so Forwarded is ignored: links (Link, Location) and client addresses are the"
            " proxy's, and one client's failed logins (PLANTS_AUTH_FAILURE_LIMIT) count against every"
            " other's. Have the proxy send X-Forwarded-For and X-Forwarded-Proto (HAProxy: option"
            " forwardfor; see docs/operations.md). (Said once per worker.)",
            self._proxies,
            extra=request_fields(environ),
        )
