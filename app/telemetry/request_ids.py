"""Every request's id, in its answer's `X-Request-Id` and in each of its log lines.

The id is the request's own `X-Request-Id` when a trusted proxy sent it (PLANTS_TRUSTED_PROXIES:
the shipped nginx configuration sets nginx's `$request_id`) and it is 1 to 128 of
`[A-Za-z0-9._:-]`; otherwise a new one, 32 random hex digits. With no trusted proxy, the first
request that comes with `X-Forwarded-*` headers logs one warning naming the setting: links and
client addresses would be the proxy's.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from app.telemetry.context import CURRENT_ENVIRON, REQUEST_ID

log = logging.getLogger(__name__)

_VALID = re.compile(r"[A-Za-z0-9._:-]{1,128}").fullmatch
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

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request_id = environ.get("HTTP_X_REQUEST_ID") if self.trusted else None
        if request_id is None or not _VALID(request_id):
            request_id = os.urandom(16).hex()
        environ[REQUEST_ID] = request_id

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            headers.append(("X-Request-Id", request_id))
            return start_response(status, headers, exc_info)

        token = CURRENT_ENVIRON.set(environ)
        try:
            if self._warn:
                self._warn_once(environ)
            return self.app(environ, start)
        finally:
            CURRENT_ENVIRON.reset(token)

    def _warn_once(self, environ: dict[str, Any]) -> None:
        sent = [name[5:].replace("_", "-").title() for name in _FORWARDED if name in environ]
        if sent:
            self._warn = False
            log.warning(
                "A request came with %s, but PLANTS_TRUSTED_PROXIES is 0, so they are ignored: links"
                " (Link, Location) and client addresses are the proxy's. Behind one proxy (the shipped"
                " nginx configuration), set PLANTS_TRUSTED_PROXIES=1. (Said once per worker.)",
                ", ".join(sent),
            )
