"""Exact paths: a doubled slash anywhere in a path is a JSON 404, never merged or redirected.

werkzeug's router merges doubled slashes (a 308 in HTML whose Location echoes the query, or a 405
naming the merged path's methods) and strips leading ones before it matches (`//plants` would be
`/plants`). The service's paths are matched exactly instead; a trailing slash is a 404 too.
"""

from __future__ import annotations

from typing import Any

from flask import Response
from werkzeug.exceptions import NotFound
from werkzeug.routing import Map

from app.http.error_handler import error_response


class ExactPaths(Map):
    """The standalone app's URL map (`Flask.url_map_class`): it never retries a path with its
    slashes merged, so a doubled slash inside a path is a plain 404."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["merge_slashes"] = False
        super().__init__(*args, **kwargs)


def doubled_leading_slash() -> Response:
    """The 404 of `//plants`, which the router matched as `/plants`: for a blueprint's
    before_request, on a PATH_INFO whose second character is a slash. As an unrouted 404: returned
    before the request is timed, its route named or its token read."""
    return error_response(NotFound())
