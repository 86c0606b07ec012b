"""Webhook endpoints, managed over the API (`/webhooks`, docs/webhooks.md).

Views of the plants blueprint, routed by its table behind its guard: every operation needs a
full-access token or a JWT with the webhooks scope, reads included, since the answers hold the
signing secrets. The deliveries themselves are app/webhooks/, never a request thread.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from typing import Any

from flask import Response, request

from app.errors import (
    InvalidWebhook,
    WebhookChanged,
    WebhookHostNotResolvedInTime,
    WebhookNotFound,
    WebhookPreconditionFailed,
    WebhookReadPreconditionFailed,
    WebhookRegistrationPreconditionFailed,
    WebhookSecretsFull,
    WebhooksFull,
    WebhooksNeedFeed,
    WebhookStoreFull,
)
from app.extension import PlantsState, plants_state
from app.http.body import read_json_object
from app.http.conditional import read_precondition, write_precondition
from app.http.cursor import EVENTS, InvalidCursor, decode_cursor
from app.http.json_provider import json_response
from app.http.links import url_of
from app.schemas.webhooks import NewWebhookSchema, ReplaySchema, WebhookPatchSchema, as_read_problems, load
from app.store import EVENT_TYPES, UNCONDITIONAL, StoreFullError
from app.store.endpoints import DISABLED, ENABLED, Endpoint, EndpointStore, delivery_fields
from app.webhooks.addresses import AddressRefused, target
from app.webhooks.drain import holds_listed
from app.webhooks.lookups import Lookups, NotResolvedInTime
from app.webhooks.message import new_secret, utc_text
from app.webhooks.urls import UrlRefused, check_url, encoded, normalized

_new_schema = NewWebhookSchema()
_patch_schema = WebhookPatchSchema()
_replay_schema = ReplaySchema()
#: How often a change is tried again when another request changed the endpoint meanwhile, or a
#: delivery's outcome moved what the change read: an endpoint that keeps up with a stream of
#: writes stores one for each, so a change made while it delivers may need a few tries.
_TRIES = 10
#: A fresh schedule of attempts for the event the deliveries stand at, due now.
_RETRY_ANEW = {"tries": "0", "due": "0"}
#: The URL's host is resolved off the request thread; a request waits on a name server at most
#: PLANTS_WEBHOOKS_LOOKUP_WAIT (lookups.py).
_lookups = Lookups()


def create_webhook() -> Response:
    """Register an endpoint; it gets the events after this moment."""
    state, endpoints = _endpoints()
    value = read_json_object(request, "NewWebhook")
    loaded, problems = load(_new_schema, value)
    if loaded is None:
        raise InvalidWebhook("NewWebhook", problems)
    # The endpoint made has no current representation (no request could name it before): If-Match
    # never holds, If-None-Match always does (RFC 9110 §13.1.1-2), as for a watch ticket's mint.
    # Judged before the URL's host is looked up: a refused registration waits on no name server.
    if not write_precondition(request, required=False).allows_absent():
        raise WebhookRegistrationPreconditionFailed()
    url = _checked_url(state, loaded["url"], "NewWebhook")
    now_ms = time.time_ns() // 1_000_000
    endpoint = Endpoint(
        id=f"wh_{secrets.token_hex(8)}",
        url=url,
        events=None if loaded.get("events") is None else tuple(loaded["events"]),
        description=loaded.get("description") or "",
        created_ms=now_ms,
        secrets=((new_secret(), None),),
        position=state.store.events_now(),
    )
    limit = state.settings.webhooks_max
    try:
        added = endpoints.add(endpoint, limit)
    except StoreFullError:
        raise WebhookStoreFull() from None
    if not added:
        raise WebhooksFull(limit, len(endpoints.ids()))
    state.deliverer.start()
    response = _with_secrets(record(endpoint), status=201)
    response.headers["Location"] = url_of(".get_webhook", endpoint_id=endpoint.id)
    return response


def list_webhooks() -> Response:
    _, endpoints = _endpoints(need_feed=False)
    return _judged(_with_secrets({"webhooks": [record(endpoint) for endpoint in endpoints.all()]}))


def get_webhook(endpoint_id: str) -> Response:
    _, endpoints = _endpoints(need_feed=False)
    return _judged(_with_secrets(record(_found(endpoints, endpoint_id))))


def _judged(response: Response) -> Response:
    """A read's answer, or its 304 or 412 (RFC 9110 §13.2.2) as for a resource without an
    entity-tag, as a change's precondition is judged (`_check_precondition`): an answer that is
    never stored has nothing to revalidate, and one whose status changes with each delivery no
    tag that would stay true. `If-Match: *` holds; `If-None-Match: *` is a 304, kept by no cache
    either."""
    unchanged = read_precondition(request, None, WebhookReadPreconditionFailed)
    if unchanged is None:
        return response
    unchanged.headers["Cache-Control"] = "no-store"
    return unchanged


def patch_webhook(endpoint_id: str) -> Response:
    """A merge patch of `url`, `events`, `description` or `status`; `enabled` resumes a failing
    or disabled endpoint from the event it holds."""
    state, endpoints = _endpoints(need_feed=False)
    value = read_json_object(request, "WebhookPatch", merge_patch=True)
    patch, problems = load(_patch_schema, value)
    if patch is None:
        raise InvalidWebhook("WebhookPatch", problems)
    url = None
    if "url" in patch:
        # Its form is the body's (400 first, as the schema's); its host is looked up (a name
        # server's wait, a refused address) only for an endpoint there is: else 404 at once.
        url = _written_url(patch["url"], "WebhookPatch")
        _found(endpoints, endpoint_id)
        _check_host(state, url, "WebhookPatch")
    _check_precondition(endpoints, endpoint_id)

    def change(endpoint: Endpoint) -> dict[str, str]:
        # Judged against the endpoint the change is made to: one a delivery moved since it was
        # read (`next_attempt`, `status_reason`) is refused rather than written past.
        problems = as_read_problems(patch, record(endpoint))
        if problems:
            raise InvalidWebhook("WebhookPatch", problems)
        fields: dict[str, str] = {}
        events = patch.get("events", endpoint.events)
        if endpoint.events is None and events == list(EVENT_TYPES):
            events = None  # every type, as a GET lists it: still every type, one added later too
        changed = dataclasses.replace(
            endpoint,
            url=url or endpoint.url,
            events=None if events is None else tuple(events),
            description=(patch["description"] or "") if "description" in patch else endpoint.description,
        )
        if changed != endpoint:
            fields["config"] = changed.config_text()
        if changed.url != endpoint.url and endpoint.status == ENABLED:
            # A retry pending for the old URL (up to hours away), or an attempt to it under way
            # (its failure would set one): the new one gets the event now, with its tries anew;
            # the epoch drops the outcome of an attempt to the old one still under way. No
            # position: the event is the one the deliveries stand at when this is stored, one
            # delivered meanwhile not sent again.
            fields.update(epoch=str(endpoint.epoch + 1), **_RETRY_ANEW)
        elif (
            _dropped_a_type(endpoint, changed)
            and endpoint.status == ENABLED
            and endpoint.tries
            and not holds_listed(state.store, endpoint, changed)
        ):
            # The event a retry holds (up to hours away) is of a type no longer listed: it is
            # looked at again now, and skipped, rather than holding the next events back. One
            # still listed keeps its retry's time: releasing it would try it ahead of its backoff.
            fields["due"] = str(time.time_ns() // 1_000_000)
        status = patch.get("status")
        if status == ENABLED and endpoint.status != ENABLED:
            fields.update(status=ENABLED, reason="", epoch=str(endpoint.epoch + 1), **_RETRY_ANEW)
        elif status == DISABLED and endpoint.status != DISABLED:
            fields.update(status=DISABLED, reason="Disabled through the API.")
        return fields

    endpoint = _changed(endpoints, endpoint_id, change)
    if endpoint.status == ENABLED:
        state.deliverer.start()
    return _with_secrets(record(endpoint))


def _dropped_a_type(endpoint: Endpoint, changed: Endpoint) -> bool:
    """Whether `changed` lists fewer of the feed's types than `endpoint` (None: every type)."""
    return bool(set(endpoint.events or EVENT_TYPES) - set(changed.events or EVENT_TYPES))


def delete_webhook(endpoint_id: str) -> Response:
    state, endpoints = _endpoints(need_feed=False)
    _check_precondition(endpoints, endpoint_id)
    if not endpoints.remove(endpoint_id):
        raise WebhookNotFound(endpoint_id)
    # The deliverer looks again now, so the endpoint's kept connection closes with it (docs/
    # webhooks.md, "Connections"), not 10 s later as an idle one.
    state.deliverer.look_now()
    return Response(status=204)


def rotate_webhook_secret(endpoint_id: str) -> Response:
    """A new secret. The current one keeps signing beside it for PLANTS_WEBHOOKS_ROTATION_OVERLAP,
    and each rotated out before until its own overlap ends; 409 rather than one more of those than
    PLANTS_WEBHOOKS_OLD_SECRETS_MAX."""
    state, endpoints = _endpoints(need_feed=False)
    settings = state.settings
    now_ms = time.time_ns() // 1_000_000
    until = now_ms + settings.webhooks_rotation_overlap * 1000
    _check_precondition(endpoints, endpoint_id)
    # Made once: a change sent again after its reply was lost, then read back, finds it current
    # and is done, rather than rotating a second time.
    fresh = new_secret()

    def change(endpoint: Endpoint) -> dict[str, str]:
        if endpoint.secrets[0][0] == fresh:
            return {}
        # Every secret rotated out, the current one included, each with when it stops signing.
        old = [(secret, until if expires is None else expires) for secret, expires in endpoint.secrets]
        kept = tuple((secret, expires) for secret, expires in old if expires > now_ms)
        if len(kept) > settings.webhooks_old_secrets_max:
            raise WebhookSecretsFull(settings.webhooks_old_secrets_max, utc_text(min(e for _, e in kept)))
        rotated = dataclasses.replace(endpoint, secrets=((fresh, None), *kept))
        return {"config": rotated.config_text()}

    return _with_secrets(record(_changed(endpoints, endpoint_id, change)))


def list_webhook_attempts(endpoint_id: str) -> Response:
    """The latest attempts, judged as the endpoint's read is (`_judged`): they have no ETag either,
    as each delivery adds one. They hold no secret, so their answers keep the guarded reads'
    `private, no-cache`."""
    _, endpoints = _endpoints(need_feed=False)
    _found(endpoints, endpoint_id)
    unchanged = read_precondition(request, None, WebhookReadPreconditionFailed)
    if unchanged is not None:
        return unchanged
    return json_response({"attempts": [json.loads(text) for text in endpoints.attempts(endpoint_id)]})


def replay_webhook(endpoint_id: str) -> Response:
    """Deliver again from a feed position (a cursor of GET /events, or `start`): 202."""
    state, endpoints = _endpoints()
    value = read_json_object(request, "Replay")
    loaded, problems = load(_replay_schema, value)
    if loaded is None:
        raise InvalidWebhook("Replay", problems)
    position: bytes | None = None
    if loaded["after"] != "start":
        store = state.store
        try:
            position = decode_cursor(store.cursor_key(), loaded["after"], None, EVENTS)
            store.feed_count(position)
        except (InvalidCursor, ValueError):
            raise InvalidWebhook(
                "Replay",
                {
                    "after": [
                        "Must be 'start' or a cursor of this service's feed (the `next` of GET /events)."
                    ]
                },
            ) from None

    _check_precondition(endpoints, endpoint_id)

    def change(endpoint: Endpoint) -> dict[str, str]:
        return {**delivery_fields(position, 0, 0), "epoch": str(endpoint.epoch + 1)}

    # Whatever its deliveries stored meanwhile: a replay sets where they stand, so an endpoint that
    # stores an outcome every few milliseconds does not hold it back (409) as a change reading them
    # would be; the new epoch keeps an attempt under way from storing its outcome after it.
    endpoint = _changed(endpoints, endpoint_id, change, overriding=True)
    state.deliverer.start()
    return _with_secrets(record(endpoint), status=202)


def _with_secrets(body: dict[str, Any], status: int = 200) -> Response:
    """An answer that holds signing secrets, credentials: never kept by a cache (a browser's
    included), like a watch ticket's answer."""
    response = json_response(body, status=status)
    response.headers["Cache-Control"] = "no-store"
    return response


def record(endpoint: Endpoint) -> dict[str, Any]:
    """The document's Webhook record."""
    return {
        "id": endpoint.id,
        "url": endpoint.url,
        "events": list(EVENT_TYPES if endpoint.events is None else endpoint.events),
        "description": endpoint.description,
        "secret": endpoint.secrets[0][0],
        "status": endpoint.status,
        "status_reason": endpoint.reason,
        "created": utc_text(endpoint.created_ms),
        "next_attempt": utc_text(endpoint.due_ms) if endpoint.status == ENABLED and endpoint.tries else None,
    }


def _endpoints(*, need_feed: bool = True) -> tuple[PlantsState, EndpointStore]:
    state = plants_state()
    store = state.serving_store(request.environ)
    if need_feed and not store.events_retain:
        raise WebhooksNeedFeed()
    return state, store.endpoints


def _found(endpoints: EndpointStore, endpoint_id: str) -> Endpoint:
    endpoint = endpoints.get(endpoint_id)
    if endpoint is None:
        raise WebhookNotFound(endpoint_id)
    return endpoint


#: An endpoint's current entity-tag: none. Its answer changes with every delivery (`status`,
#: `next_attempt`) without a change through the API, so no tag would stay true of it. No tag a
#: client sends can equal this one (an opaque tag holds no space): only `If-Match: *` holds.
_NO_ENTITY_TAG = " "


def _check_precondition(endpoints: EndpointStore, endpoint_id: str) -> None:
    """RFC 9110 §13.1.1-2 for a resource without an entity-tag: 412 for an If-Match other than `*`
    and for `If-None-Match: *`, once the endpoint is found (404 first, whatever the precondition)."""
    precondition = write_precondition(request, required=False)
    if precondition == UNCONDITIONAL:
        return
    _found(endpoints, endpoint_id)
    if not precondition.allows(_NO_ENTITY_TAG):
        raise WebhookPreconditionFailed(endpoint_id)


def _changed(
    endpoints: EndpointStore, endpoint_id: str, change: Any, *, overriding: bool = False
) -> Endpoint:
    """Apply `change` (the endpoint's fields to write, from the endpoint) under the revision
    check, again when another request changed the endpoint meanwhile, or a delivery's outcome
    moved what the change read of it (unless `overriding`: EndpointStore.update); the endpoint
    after it."""
    for _ in range(_TRIES):
        endpoint = _found(endpoints, endpoint_id)
        fields = change(endpoint)
        if not fields:
            return endpoint
        try:
            written = endpoints.update(endpoint, fields, overriding=overriding)
        except StoreFullError:
            raise WebhookStoreFull() from None
        if written is None:
            raise WebhookNotFound(endpoint_id)
        if written:
            return _found(endpoints, endpoint_id)
    raise WebhookChanged()


def _caller_key(state: PlantsState) -> bytes:
    """Whose lookup this is: the token's (a JWT's subject's) limit key, one lookup in flight each."""
    _, caller = state.auth.authenticate(request.environ.get("HTTP_AUTHORIZATION"))
    return caller.limit_key if caller is not None else b""


def _checked_url(state: PlantsState, url: str, body: str) -> str:
    """The URL as it is kept (`_written_url`), once its host is checked (`_check_host`)."""
    url = _written_url(url, body)
    _check_host(state, url, body)
    return url


def _written_url(url: str, body: str) -> str:
    """The URL as it is kept, its scheme and host in lower case and its non-ASCII characters
    percent-encoded; 400 naming `url` when it is malformed, the message naming `body` as the
    document names the record it came in. Its host is not looked up."""
    try:
        check_url(url)
    except UrlRefused as exc:
        raise InvalidWebhook(body, {"url": [str(exc)]}) from None
    return encoded(normalized(url))


def _check_host(state: PlantsState, url: str, body: str) -> None:
    """400 naming `url` when a written URL's host is, or resolves to, a refused address (as
    `_written_url` says). A name that does not resolve (yet) is accepted: each delivery checks it
    again. 503 when the name is being resolved still."""
    try:
        settings = state.settings
        resolve = _lookups.for_owner(_caller_key(state), settings.webhooks_lookup_wait)
        target(url, settings.webhooks_allow_hosts, resolve)
    except NotResolvedInTime as exc:
        raise WebhookHostNotResolvedInTime(exc.host, exc.busy) from None
    except AddressRefused as exc:
        if exc.reason != "name_not_resolved":
            raise InvalidWebhook(body, {"url": [str(exc)]}) from None
    except UrlRefused as exc:
        raise InvalidWebhook(body, {"url": [str(exc)]}) from None
