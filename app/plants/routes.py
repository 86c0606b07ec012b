"""The route table: every operation of the plants blueprint, with its rule, method, view and access.

The URL rules, the JSON 405 of every other method (with `Allow`), OPTIONS, the guard's sets of
writes, reads and public views, and the scope of each documented operation are all derived from
it: adding an operation is one entry here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, NamedTuple

from flask import Blueprint
from flask.blueprints import BlueprintSetupState

from app.errors import MethodNotServed
from app.http.options import options_view
from app.plants import changes, docs, events, exposition, items, tickets, webhooks


class Access(enum.Enum):
    #: No token: the document, the page, OPTIONS, and the 405s that say only which methods to use.
    PUBLIC = "public"
    #: Any accepted token (a JWT with the read scope or the write scope).
    READ = "read"
    #: A full-access token (a JWT with the write scope).
    WRITE = "write"
    #: A full-access static token, or a JWT with the webhooks scope: every /webhooks operation.
    WEBHOOKS = "webhooks"


class Route(NamedTuple):
    rule: str
    method: str
    view: Callable[..., Any]
    access: Access
    #: The operation's id in openapi.yaml; None for routes outside the interface document.
    operation_id: str | None = None
    #: Whether a request counts against its token's rate limit (every route behind a token does).
    limited: bool = True
    #: Whether a request goes on uncounted when the limits' store does not answer (else a 503).
    uncounted_when_down: bool = False


#: The operations of the interface document.
OPERATIONS: tuple[Route, ...] = (
    Route("/plants", "POST", items.create_plant, Access.WRITE, "addPlant"),
    Route("/plants", "GET", items.list_plants, Access.READ, "listPlants"),
    Route("/plants/<plant_id>", "GET", items.get_plant, Access.READ, "getPlant"),
    Route("/plants/<plant_id>", "PUT", changes.replace_plant, Access.WRITE, "replacePlant"),
    Route("/plants/<plant_id>", "PATCH", changes.patch_plant, Access.WRITE, "patchPlant"),
    Route("/plants/<plant_id>", "DELETE", items.delete_plant, Access.WRITE, "deletePlant"),
    Route("/events", "GET", events.list_events, Access.READ, "listEvents"),
    Route("/events/tickets", "POST", tickets.create_watch_ticket, Access.READ, "createWatchTicket"),
    Route("/webhooks", "POST", webhooks.create_webhook, Access.WEBHOOKS, "createWebhook"),
    Route("/webhooks", "GET", webhooks.list_webhooks, Access.WEBHOOKS, "listWebhooks"),
    Route("/webhooks/<endpoint_id>", "GET", webhooks.get_webhook, Access.WEBHOOKS, "getWebhook"),
    Route("/webhooks/<endpoint_id>", "PATCH", webhooks.patch_webhook, Access.WEBHOOKS, "patchWebhook"),
    Route("/webhooks/<endpoint_id>", "DELETE", webhooks.delete_webhook, Access.WEBHOOKS, "deleteWebhook"),
    Route(
        "/webhooks/<endpoint_id>/rotate",
        "POST",
        webhooks.rotate_webhook_secret,
        Access.WEBHOOKS,
        "rotateWebhookSecret",
    ),
    Route(
        "/webhooks/<endpoint_id>/attempts",
        "GET",
        webhooks.list_webhook_attempts,
        Access.WEBHOOKS,
        "listWebhookAttempts",
    ),
    Route(
        "/webhooks/<endpoint_id>/replay", "POST", webhooks.replay_webhook, Access.WEBHOOKS, "replayWebhook"
    ),
)
#: A rule's path variable by the document's name for it, where the two differ.
PATH_PARAMETERS = {"plant_id": "id"}
#: The documented operations that need the write scope.
WRITE_OPERATIONS = frozenset(
    route.operation_id for route in OPERATIONS if route.operation_id and route.access is Access.WRITE
)
#: The documented operations that need the webhooks scope.
WEBHOOK_OPERATIONS = frozenset(
    route.operation_id for route in OPERATIONS if route.operation_id and route.access is Access.WEBHOOKS
)
#: Every route: the operations, then the metrics, the document (which states each operation's
#: scope, so it is given the sets above) and the API page.
ROUTES: tuple[Route, ...] = (
    *OPERATIONS,
    # Counted as an operation: a scrape is cheap to ask for and costly to answer (every worker's
    # files, summed), and any read token may ask. A scraper is given a token of its own. A scrape
    # still answers while Redis does not (uncounted): the metrics are wanted most then, and are
    # read from the workers' files, not from Redis.
    Route("/metrics", "GET", exposition.metrics, Access.READ, uncounted_when_down=True),
    Route(
        "/openapi.json",
        "GET",
        docs.openapi_view(WRITE_OPERATIONS, WEBHOOK_OPERATIONS),
        Access.PUBLIC,
        limited=False,
    ),
    Route("/docs", "GET", docs.page, Access.PUBLIC, limited=False),
    Route("/docs/init.js", "GET", docs.init_script, Access.PUBLIC, limited=False),
    Route("/docs/assets/<name>", "GET", docs.asset, Access.PUBLIC, limited=False),
)

#: The methods a rule's 405 is registered for by name (any other reaches it too: see
#: `_refuse_every_other_method`), so that an embedded blueprint answers them rather than its
#: host's page; OPTIONS is served on every rule (app/http/options.py).
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "TRACE")


def allowed_methods(rule: str) -> tuple[str, ...]:
    """The methods `rule` serves: its routes', and HEAD beside GET (RFC 9110 §9.3.2)."""
    served = {route.method for route in ROUTES if route.rule == rule}
    if "GET" in served:
        served.add("HEAD")
    return tuple(method for method in METHODS if method in served)


def _refusal(number: int, rule: str) -> tuple[str, Callable[..., Any], tuple[str, ...]]:
    """The 405 view of an operation's `rule`, and the methods it answers."""
    allowed = allowed_methods(rule)

    def other_method(**_: Any) -> Any:
        raise MethodNotServed(valid_methods=(*allowed, "OPTIONS"))  # as OPTIONS's Allow

    other_method.__name__ = f"other_method_{number}"
    return rule, other_method, tuple(method for method in METHODS if method not in allowed)


#: For each rule, the view of its 405, and the methods it answers.
REFUSALS = tuple(
    _refusal(number, rule) for number, rule in enumerate(dict.fromkeys(route.rule for route in ROUTES))
)
#: For every rule, the view of OPTIONS: 204 with its Allow, no token.
OPTIONS = tuple(
    (rule, options_view(allowed_methods(rule), f"options_{number}"))
    for number, rule in enumerate(dict.fromkeys(route.rule for route in ROUTES))
)
#: Each view's access, by its name (Flask's endpoint without the blueprint's).
ACCESS: dict[str, Access] = {
    **{route.view.__name__: route.access for route in ROUTES},
    **{view.__name__: Access.PUBLIC for _, view, _ in REFUSALS},
    **{view.__name__: Access.PUBLIC for _, view in OPTIONS},
}
#: The views that accept a watch ticket (app/auth/watch_tickets.py) in place of a bearer header.
TICKET_VIEWS = frozenset({events.list_events.__name__})
#: The views whose answer's form (a page or a stream) is chosen by `Accept`.
NEGOTIATED = frozenset({events.list_events.__name__})
#: The views that may set their own Cache-Control (a credential's `no-store`): only their answers
#: are looked through for one (app/http/caching.py).
OWN_CACHE_CONTROL = frozenset(
    {
        tickets.create_watch_ticket.__name__,
        *(route.view.__name__ for route in ROUTES if route.access is Access.WEBHOOKS),
    }
)
#: The views whose requests count against their token's rate limit.
LIMITED = frozenset(route.view.__name__ for route in ROUTES if route.limited)
#: The limited views answered uncounted while the limits' store does not answer.
UNCOUNTED_WHEN_DOWN = frozenset(route.view.__name__ for route in ROUTES if route.uncounted_when_down)


def add_routes(bp: Blueprint) -> None:
    """Route every entry of the table on `bp`, the other methods of each operation's rule to its
    405, and OPTIONS of every rule to its view.

    No rule merges doubled slashes: werkzeug would answer `/plants//1` with a 308 in HTML whose
    Location echoes the query (a watch ticket's too), outside every error handler. It is a 404."""
    for route in ROUTES:
        bp.add_url_rule(
            route.rule,
            view_func=route.view,
            methods=[route.method],
            provide_automatic_options=False,
            merge_slashes=False,
        )
    for rule, view, methods in REFUSALS:
        bp.add_url_rule(
            rule, view_func=view, methods=list(methods), provide_automatic_options=False, merge_slashes=False
        )
    for rule, view in OPTIONS:
        bp.add_url_rule(
            rule, view_func=view, methods=["OPTIONS"], provide_automatic_options=False, merge_slashes=False
        )
    bp.record(_refuse_every_other_method)


def _refuse_every_other_method(setup: BlueprintSetupState) -> None:
    """Each rule's 405 for any method at all, after its own rules (werkzeug tries a path's rules in
    the order they were added). A method none of them names (PROPFIND, a made-up one) would be
    the router's 405, answered by the app's own handler: an embedding host's HTML page, without
    `Allow`. Flask's `add_url_rule` names the methods a rule takes; a rule for every method is
    the same rule, as registered, with none named (`methods=None`). Its `merge_slashes` too, which
    `get_empty_kwargs` leaves out: a host's map merges by default, and a doubled slash with a
    method only this rule takes would be a 308 in HTML whose Location echoes the query."""
    url_map = setup.app.url_map
    for _, view, _ in REFUSALS:
        endpoint = f"{setup.name_prefix}.{setup.name}.{view.__name__}".lstrip(".")
        for registered in list(url_map.iter_rules(endpoint)):
            kwargs = {
                **registered.get_empty_kwargs(),
                "methods": None,
                "merge_slashes": registered.merge_slashes,
            }
            url_map.add(type(registered)(registered.rule, **kwargs))
