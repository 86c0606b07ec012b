"""The plants blueprint's one before-request guard: timing, the bearer token, rate limits, scope.

A refusal is returned, not raised: Flask then answers with it and skips the view, without its
exception handling. An unauthenticated client cannot make the service read anything. One hook,
with one look-up of the request and the state: it runs on every request.
"""

from __future__ import annotations

import logging

from flask import Response, current_app, request
from limits.errors import StorageError
from redis.exceptions import RedisError
from werkzeug.exceptions import ServiceUnavailable

from . import docs
from .errors import error_response
from .metrics import count_store_error, start_timer
from .rate_limits import RateLimitExceeded, remember
from .state import EXTENSION
from .store import StoreUnavailableError
from .store.redis_connection import unavailable

log = logging.getLogger(__name__)

#: The methods each route serves, by the view that serves its GET: every other method is a
#: JSON 405 before authentication. HEAD is GET without the body (RFC 9110 §9.3.2), which Werkzeug
#: routes to the GET view.
ALLOWED_METHODS = {
    "list_plants": ("GET", "HEAD", "POST"),
    "get_plant": ("GET", "HEAD", "PUT", "PATCH", "DELETE"),
    "list_events": ("GET", "HEAD"),
}
#: The operations a read-only token (or a JWT without the write scope) may not use.
WRITES = frozenset({"create_plant", "delete_plant", "replace_plant", "patch_plant"})
#: The plant operations: each needs a token and counts against its rate limit.
OPERATIONS = WRITES | {"list_plants", "get_plant", "list_events"}
#: Views that need no token: the document and the page, and the 405s that say only which
#: methods to use.
PUBLIC_VIEWS = docs.PUBLIC_VIEWS | {"other_method", "other_method_on_plant", "other_method_on_events"}


def guard() -> Response | None:
    """The blueprint's before_request: refuse here, or let the view run."""
    req = request._get_current_object()
    environ = req.environ
    state = current_app.extensions[EXTENSION]
    if state.metrics is not None:
        start_timer(environ)  # refusals are timed too
    rule = req.url_rule
    view = rule.endpoint.rpartition(".")[2] if rule is not None else ""
    if view in PUBLIC_VIEWS:
        return None
    problem, caller = state.auth.authenticate(environ.get("HTTP_AUTHORIZATION"))
    limits = state.rate_limits
    # A 503 (the provider's keys not loaded yet) is not the client's failure.
    if limits is not None and (problem is None or problem.code != 503):
        try:
            if problem is not None:
                limits.check_auth_failure(req.remote_addr)
            elif view in OPERATIONS:
                remember(environ, limits.check_token(caller.limit_key))
        except RateLimitExceeded as exc:
            return error_response(exc)
        except StorageError as exc:
            return error_response(store_unavailable(limit_store_unavailable(exc)))
    if problem is None:
        problem = caller.write_refusal if view in WRITES else caller.read_refusal
        if problem is None:
            return None
    if state.metrics is not None:
        state.metrics.count_refusal(problem.reason)
    return error_response(problem)


def limit_store_unavailable(exc: StorageError) -> StoreUnavailableError:
    """The rate limits' Redis failed: the same 503 as the store's."""
    cause = exc.storage_error
    return (
        unavailable(cause) if isinstance(cause, RedisError) else StoreUnavailableError("other", "rate limits")
    )


def store_unavailable(exc: StoreUnavailableError) -> ServiceUnavailable:
    """The 503 for a store that did not answer in time; the client may retry after a second."""
    count_store_error(exc.reason)
    if exc.reason == "needs_migration":
        log.error("The plant store cannot list plants: %s", exc)
        return ServiceUnavailable(
            "The plant store must be upgraded by its operator before it can list plants.", retry_after=60
        )
    if exc.reason == "replication":
        log.warning("The plant store's replicas did not confirm a write: %s", exc)
        return ServiceUnavailable(
            "The plant store's replicas did not confirm the write in time; retry shortly"
            " (a create that did land answers 200 again).",
            retry_after=1,
        )
    address = current_app.extensions[EXTENSION].store_address
    log.warning("The plant store at %s did not answer: %s", address, exc)
    return ServiceUnavailable("The plant store is not answering right now; retry shortly.", retry_after=1)
