"""The plants blueprint's one before-request guard: a transfer coding it cannot read, timing, the
bearer token, rate limits, scope, and, for a caller let in, a path whose segments are not UTF-8.

What each view needs comes from the route table (app/plants/routes.py). A refusal is returned,
not raised: Flask then answers with it and skips the view, without its exception handling. An
unauthenticated client cannot make the service read anything. One hook, with one look-up of the
request and the state: it runs on every request. The caller it let in is kept on `g` for the
views (app/auth/caller.py's `current_caller`): a request is authenticated once.
"""

from __future__ import annotations

from flask import Request, Response, current_app, request

from app.auth.caller import keep
from app.auth.rate_limits import remember
from app.auth.static import NO_CREDENTIALS, TICKET_WITHOUT_TOKEN
from app.auth.watch_tickets import TICKET_CALLER
from app.errors import InvalidParameters, MalformedTicket, RateLimitExceeded
from app.extension import plants_state
from app.http.body import transfer_coded
from app.http.error_handler import error_response
from app.http.paths import doubled_leading_slash
from app.metrics import start_timer
from app.plants.routes import ACCESS, LIMITED, PATH_PARAMETERS, TICKET_VIEWS, UNCOUNTED_WHEN_DOWN, Access
from app.schemas.parameters import NOT_UTF8, ticket_problems
from app.store import StoreFullError, StoreUnavailableError
from app.telemetry.context import CALLER_KIND, ROUTE

#: The environ key of the view a request behind a token is for, named here once for the
#: request's end (app/plants/__init__.py): absent on a public answer.
GUARDED_VIEW = "plants.guarded_view"


def guard() -> Response | None:
    """The blueprint's before_request: refuse here, or let the view run."""
    req = request._get_current_object()  # type: ignore[attr-defined]
    environ = req.environ
    if environ.get("PATH_INFO", "")[1:2] == "/":  # inline: the guard runs on every request
        return doubled_leading_slash()
    if "HTTP_TRANSFER_ENCODING" in environ and (coded := transfer_coded(environ)) is not None:
        return error_response(coded)  # before all else, as the packaged worker's parser answers it
    state = plants_state(current_app._get_current_object())  # type: ignore[attr-defined]
    if state.metrics is not None:
        start_timer(environ)  # refusals are timed too
    rule = req.url_rule
    view = rule.endpoint.rpartition(".")[2] if rule is not None else ""
    if rule is not None:
        environ[ROUTE] = rule.rule
    access = ACCESS.get(view, Access.READ)
    if access is Access.PUBLIC:
        # And so every other method of an operation (its 405) and OPTIONS (a CORS preflight too).
        return None
    environ[GUARDED_VIEW] = view
    problem, caller = state.auth.authenticate(environ.get("HTTP_AUTHORIZATION"))
    if caller is None and view in TICKET_VIEWS and "HTTP_AUTHORIZATION" not in environ:
        ticket = req.args.get("ticket")
        if ticket is not None:
            # The credential, so checked first, and counted as a refused one: not of a ticket's
            # form is a malformed request (400 naming it, as a malformed bearer token is 400),
            # of its form but not accepted a 401.
            malformed = ticket_problems(ticket, req.query_string)
            if malformed:
                problem = MalformedTicket(malformed)
            else:
                query = environ.get("QUERY_STRING", "")
                # The key is read (from the store, the first time) only for a ticket that needs it.
                problem, caller = state.auth.tickets.verify(ticket, state.store.cursor_key, query)
            if caller is not None:
                environ[TICKET_CALLER] = caller
    elif (
        caller is None and problem is NO_CREDENTIALS and environ.get("QUERY_STRING") and "ticket" in req.args
    ):
        problem = TICKET_WITHOUT_TOKEN  # a ticket where a token is needed: told where a ticket goes
    if caller is not None:
        environ[CALLER_KIND] = caller.kind
        keep(caller)
    limits = state.rate_limits
    # A 503 (the provider's keys not loaded yet) is not the client's failure.
    if limits is not None and (problem is None or problem.code != 503):
        try:
            if problem is not None:
                limits.check_auth_failure(req.remote_addr)
            elif view in LIMITED:
                assert caller is not None  # authenticated
                remember(environ, limits.check_token(caller.limit_key))
        except RateLimitExceeded as exc:
            return error_response(exc)
        except StoreUnavailableError as exc:
            refusal = state.store_unavailable(exc)  # logged and counted either way
            if view not in UNCOUNTED_WHEN_DOWN:
                return error_response(refusal)
        except StoreFullError:
            # Redis is at its maxmemory: no counter can be written, though Redis answers. The
            # request goes on uncounted, so that reads, deletes (which make room) and a refused
            # token's 401 still answer, rather than a 503 for every request.
            limits.uncounted()
    if problem is None:
        assert caller is not None
        problem = (
            caller.read_refusal
            if access is Access.READ
            else caller.write_refusal
            if access is Access.WRITE
            else caller.webhooks_refusal
        )
        if problem is None:
            # Inline: a path past ASCII is rare, and the guard runs on every request.
            return None if environ.get("PATH_INFO", "").isascii() else _path_not_utf8(req)
    if state.metrics is not None:
        state.metrics.count_refusal(problem.reason)  # type: ignore[attr-defined]  # the auth package's refusals
    return error_response(problem)


def _path_not_utf8(req: Request) -> Response | None:
    """400 naming the path parameter whose segment is not UTF-8 once percent-decoded: werkzeug's
    router reads such bytes as U+FFFD, so the view would look up another id than the one sent."""
    try:
        req.environ["PATH_INFO"].encode("latin-1").decode()
    except UnicodeError:
        args = req.view_args or {}
        names = [PATH_PARAMETERS.get(name, name) for name, value in args.items() if "\ufffd" in value]
        if names:
            return error_response(InvalidParameters({name: [NOT_UTF8] for name in names}))
    return None
