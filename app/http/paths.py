"""Exact paths: a doubled slash anywhere in a path is a JSON 404, never merged or redirected.

werkzeug's router merges doubled slashes (a 308 in HTML whose Location echoes the query, or a 405
naming the merged path's methods) and strips leading ones before it matches (`//plants` would be
`/plants`). The service's paths are matched exactly instead; a trailing slash is a 404 too. A request that
asks to upgrade to a websocket is matched as the plain HTTP request it also is.
"""

from __future__ import annotations

from typing import Any

from flask import Response
from werkzeug.routing import Map, MapAdapter

from app.errors import NoSuchPath
from app.http.error_handler import error_response


class ExactPaths(Map):
    """The standalone app's URL map (`Flask.url_map_class`): it never retries a path with its
    slashes merged, so a doubled slash inside a path is a plain 404."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["merge_slashes"] = False
        super().__init__(*args, **kwargs)

    def bind_to_environ(
        self, environ: Any, server_name: str | None = None, subdomain: str | None = None
    ) -> MapAdapter:
        """Werkzeug's, but `Upgrade: websocket` is not read: werkzeug matches such a request only to
        websocket rules, so with none every route answered 405. The service has no websocket
        endpoint, and a server may ignore Upgrade and answer the request as it is (RFC 9110
        section 7.8); the packaged worker closes the connection after that answer."""
        env = environ if isinstance(environ, dict) else environ.environ  # werkzeug takes a Request too
        if "HTTP_UPGRADE" in env:
            environ = {**env, "HTTP_UPGRADE": ""}
        return super().bind_to_environ(environ, server_name, subdomain)


def doubled_leading_slash() -> Response:
    """The 404 of `//plants`, which the router matched as `/plants`: for a blueprint's
    before_request, on a PATH_INFO whose second character is a slash. As an unrouted 404: returned
    before the request is timed, its route named or its token read."""
    return error_response(NoSuchPath())
