"""`OPTIONS` on every route: 204 with `Allow` (the route's methods and OPTIONS itself), no body,
no token needed, never rate limited, as Flask's automatic OPTIONS answers but for its 200 with a
Content-Type and nothing to describe. A CORS preflight is such a request too: cors.py adds its
headers to the same answer when the origin is allowed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flask import Response


def no_content() -> Response:
    """A 204, with no Content-Type: it has no body to describe (a Response has one by default)."""
    response = Response(status=204)
    del response.headers["Content-Type"]
    return response


def options_view(methods: Iterable[str], name: str) -> Callable[..., Response]:
    """The OPTIONS view of a rule that serves `methods`, named `name` (Flask's endpoint)."""
    allow = ", ".join([*(method for method in methods if method != "OPTIONS"), "OPTIONS"])

    def options(**_: Any) -> Response:
        response = no_content()
        response.headers["Allow"] = allow
        return response

    options.__name__ = name
    options.allow = allow  # type: ignore[attr-defined]  # read for a method no rule names (error_handler.py)
    return options
