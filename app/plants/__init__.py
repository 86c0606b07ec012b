"""The plants blueprint: the service's operations, routed by one table (routes.py) behind one
guard (guard.py), answering every error as the JSON Error record.

Register it in any Flask app: its settings come from that app's config, and its state lives in
that app's extensions (app/extension.py), so apps never share plants.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, Response, current_app, request
from flask.blueprints import BlueprintSetupState

from app.auth.rate_limits import add_headers
from app.compat.flask import specific_handler
from app.errors import InsufficientStorage, SplitStoreRefused
from app.extension import init_state, plants_state
from app.http import caching
from app.http.body import bound_before_the_host
from app.http.error_handler import error_response, register_json_errors
from app.http.split_guard import SplitStoreError
from app.plants import deprecation
from app.plants.guard import GUARDED_VIEW, guard
from app.plants.routes import NEGOTIATED, OWN_CACHE_CONTROL, add_routes
from app.store import StoreFullError, StoreUnavailableError

__all__ = ["bp"]

log = logging.getLogger(__name__)

bp = Blueprint("plants", __name__)
register_json_errors(bp)
add_routes(bp)
bp.before_request(guard)


@bp.record
def _init_state(setup: BlueprintSetupState) -> None:
    """Fail closed at registration: no tokens configured, no service."""
    _refuse_variable_mount(setup)
    state = init_state(setup.app)  # type: ignore[arg-type]  # a Flask app
    deprecation.prepare(state.deprecated)  # an operation deprecated without its date stops the start
    if setup.app.config.get("MAX_CONTENT_LENGTH") is None:
        # A host's app: the standalone app sets its limit, and pays nothing on its requests.
        endpoints = f"{setup.name_prefix}.{setup.name}.".lstrip(".")
        setup.app.url_value_preprocessor(bound_before_the_host(endpoints))


def _refuse_variable_mount(setup: BlueprintSetupState) -> None:
    """A variable in the prefix (`/t/<tenant>`) or subdomain would reach every view as an argument
    none takes (a 500 on every route), and would promise a store per value where the app has one."""
    for part, value in (("url_prefix", setup.url_prefix), ("subdomain", setup.subdomain)):
        if value and "<" in value:
            raise ValueError(
                f"The plants blueprint's {part} must be fixed: {value!r} has a variable, and one app"
                " serves one plant store (register it in one app per tenant instead)."
            )


@bp.errorhandler(Exception)
def _unexpected(exc: Exception) -> Any:
    """An unexpected error goes on to Flask's own handling (logged, or propagated under
    PROPAGATE_EXCEPTIONS) and its 500, which the JSON handler answers: a host's handler for every
    Exception (its HTML error page) must not answer the blueprint's routes. A host's handler for a
    class of its own still does. The blueprint's own handlers come before a host's in Flask's
    search, and the more specific ones before this."""
    host = current_app._get_current_object()  # type: ignore[attr-defined]
    handler = specific_handler(host, exc, (*request.blueprints[1:], None))
    if handler is None:
        raise exc
    return host.ensure_sync(handler)(exc)


@bp.after_request
def _finish(response: Response) -> Response:
    """Every answer of the blueprint: counted in the metrics, with the rate-limit, caching and CORS
    headers, and with the announcement of a deprecated operation (app/plants/deprecation.py)."""
    state = plants_state(current_app._get_current_object())  # type: ignore[attr-defined]
    req = request._get_current_object()  # type: ignore[attr-defined]
    environ = req.environ
    if state.metrics is not None:
        state.metrics.observe(req, response)
    if state.deprecated:
        deprecated = deprecation.announce(state.deprecated, req.endpoint, req.method, response)
        if deprecated is not None and state.metrics is not None:
            state.metrics.count_deprecated(deprecated)
    if state.rate_limits is not None:
        add_headers(environ, response)
    view = environ.get(GUARDED_VIEW)  # named by the guard; None on a public answer
    if view is not None and req.method in caching.KEPT_METHODS:
        caching.finish(response, own=view in OWN_CACHE_CONTROL, negotiated=view in NEGOTIATED)
    if state.cors is not None:
        state.cors.finish(environ, response)
    return response


@bp.errorhandler(StoreUnavailableError)
def _store_unavailable(exc: StoreUnavailableError) -> Response:
    return error_response(plants_state().store_unavailable(exc))


@bp.errorhandler(StoreFullError)
def _store_full(exc: StoreFullError) -> Response:
    return error_response(InsufficientStorage())


@bp.errorhandler(SplitStoreError)
def _split_store(exc: SplitStoreError) -> Response:
    rule = request.url_rule.rule if request.url_rule is not None else request.path
    log.error("Refusing %s %s: %s.", request.method, rule, exc)
    return error_response(SplitStoreRefused())
