"""The one error handler: every HTTP error (app/errors.py) as the JSON Error record."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Blueprint, Flask, Response, current_app, request
from werkzeug.exceptions import BadHost, HTTPException, MethodNotAllowed, default_exceptions

from app.errors import InvalidHost, MethodNotServed
from app.http.json_provider import json_response


def http_error_to_json(exc: HTTPException) -> HTTPException | Response:
    """The error handler: every HTTP error as the JSON Error record; redirects pass through."""
    if exc.code is None or exc.code < 400:
        # Routing redirects are HTTPExceptions too; they are not errors.
        return exc
    if type(exc) is BadHost:
        exc = InvalidHost()
    elif type(exc) is MethodNotAllowed and request.routing_exception is exc:
        exc = _served_methods(exc)
    return error_response(exc)


def _served_methods(exc: MethodNotAllowed) -> MethodNotAllowed:
    """A method that no rule of the path names (PROPFIND): Werkzeug's Allow joins the methods of
    every rule of the path, those a rule names only to refuse them with its own 405 included.
    What the path serves is what its OPTIONS view (options.py) says."""
    adapter = current_app.create_url_adapter(request)
    try:
        rule, _ = adapter.match(method="OPTIONS", return_rule=True)  # type: ignore[union-attr]
    except HTTPException:
        return exc
    allow = getattr(current_app.view_functions.get(rule.endpoint), "allow", None)
    return exc if allow is None else MethodNotServed(valid_methods=allow.split(", "))


def error_response(exc: HTTPException) -> Response:
    """The JSON Error record for an HTTP error (code >= 400), keeping its status and headers."""
    record: dict[str, Any] = {"error": exc.code, "message": exc.description or exc.name}
    details = getattr(exc, "details", None)
    if details:
        record["details"] = details
    # Built directly, not through ErrorSchema.dump: a dump costs as much as the rest of the
    # handler, and the tests load every error response through ErrorSchema instead.
    response = json_response(record)
    response.status_code = exc.code  # type: ignore[assignment]  # an error: code >= 400
    # Allow (405), WWW-Authenticate (401) and the like; the body is ours. Werkzeug's own
    # get_headers gives only its Content-Type, so most responses need no extending.
    if type(exc).get_headers is not HTTPException.get_headers:
        response.headers.extend(
            [(name, value) for name, value in exc.get_headers() if name.lower() != "content-type"]
        )
    return response


View = TypeVar("View", bound=Callable[..., Any])


def answered_where_raised(view: View) -> View:
    """`view`, whose HTTP errors go to the one handler (http_error_to_json) straight from where they
    are raised, rather than after Flask's search of the app's and the blueprint's error handlers.

    The answer is the same; the search is not free: it is a measurable share of a refused create's
    cost (an invalid NewPlant, a client's common refusal: `python -m bench instructions 400`), and
    this catch a small part of it. For the views on such a path only."""

    @functools.wraps(view)
    def answering(*args: Any, **kwargs: Any) -> Any:
        try:
            return view(*args, **kwargs)
        except HTTPException as exc:
            return http_error_to_json(exc)

    return answering  # type: ignore[return-value]  # the same signature, by functools.wraps


def register_json_errors(target: Flask | Blueprint) -> None:
    """Answer every HTTP error raised in `target` with the JSON Error record.

    The handler is registered for each error status Werkzeug knows as well as for
    HTTPException: Flask prefers a host app's handler for a status (`errorhandler(400)`)
    to a blueprint's handler for a class, so without these a host's own error pages would
    replace the blueprint's JSON. Unhandled exceptions reach this too: Flask logs them and
    passes an InternalServerError, whose generic message reveals nothing.
    """
    target.register_error_handler(HTTPException, http_error_to_json)
    for code in default_exceptions:
        if code >= 400:
            target.register_error_handler(code, http_error_to_json)
