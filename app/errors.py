"""Every HTTP error the service answers, in one catalogue, each a Werkzeug `HTTPException`.

The handler that writes them as the JSON Error record is app/http/error_handler.py.
"""

from __future__ import annotations

import re
from typing import Any

from werkzeug.exceptions import (
    BadHost,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    HTTPException,
    InternalServerError,
    MethodNotAllowed,
    NotFound,
    NotImplemented,
    PreconditionFailed,
    PreconditionRequired,
    RequestEntityTooLarge,
    RequestTimeout,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
    UnsupportedMediaType,
)

REALM = "plants"


class InvalidFields(BadRequest):
    """A request part that marshmallow refused; `details` names each field and says why."""

    def __init__(self, problem: str, kind: str, details: dict[str, list[str]]) -> None:
        super().__init__(f"{problem} Invalid {kind}: {', '.join(sorted(details))}.")
        self.details = details


class InvalidPlant(InvalidFields):
    """A body that is JSON but not a valid NewPlant."""

    def __init__(self, details: dict[str, list[str]]) -> None:
        super().__init__("The request body is not a valid NewPlant.", "fields", details)


class InvalidParameters(InvalidFields):
    """A path or query parameter that is not valid (`id`, `limit`, `after`, `tags`, or unknown)."""

    def __init__(self, details: dict[str, list[str]]) -> None:
        super().__init__("The request's parameters are not valid.", "parameters", details)


class InvalidBody(BadRequest):
    """A body that is not one JSON object: empty (naming the record), not JSON (saying why), or
    another JSON value (naming the record)."""

    EMPTY = "The request body is empty; send a {} JSON object."
    NOT_JSON = "The request body is not valid JSON: {}."
    NOT_AN_OBJECT = "The request body must be a JSON object (a {})."

    def __init__(self, template: str, subject: str) -> None:
        super().__init__(template.format(subject))


class BodyTooLarge(RequestEntityTooLarge):
    def __init__(self, limit: int) -> None:
        super().__init__(f"The request body is larger than the limit of {limit} bytes.")


class BodyCutShort(RequestTimeout):
    """The body stalled past the server's read timeout, or the client left."""

    description = "The request body was not received in full before the client stopped sending."


class BodyReadByHost(InternalServerError):
    """A host app's own hook read the body (`request.stream.read()`) and kept none of it: the
    write cannot have it. The server's fault, not the client's, so neither a 400 nor a 408."""

    description = (
        "The request body was read by the host application before the plants API could read it: "
        "nothing was written."
    )


class MalformedFraming(BadRequest):
    """The WSGI server refused the body's framing (gunicorn: a bad chunk size)."""

    description = "The request body's framing is malformed (e.g. an invalid chunk)."


class PartialBody(BadRequest):
    """A write's body that is a part of a representation (`Content-Range`): the service takes a
    body whole, and a part read as the whole would store what the client did not mean (RFC 9110
    §14.5: a PUT with Content-Range to a resource without partial PUT is a 400)."""

    description = (
        "The request has Content-Range: a write takes its whole body, never a part; send it whole,"
        " without Content-Range."
    )

    def __init__(self) -> None:
        super().__init__()
        # Named as every refused request part is (the document's 400s: "field, parameter or header").
        self.details = {"Content-Range": ["A write takes its whole body: leave the header out."]}


class NotJsonContent(UnsupportedMediaType):
    """415 for a body of another type than JSON, or JSON in another charset than UTF-8."""

    description = "The request body must be sent as 'Content-Type: application/json'."


#: What a body's charset other than UTF-8 is told, as JSON or as a merge patch.
UTF8_ONLY = "JSON must be encoded as UTF-8."


class InvalidHost(BadHost):
    """Werkzeug's BadHost (a Host header that is no host name: `a..b`), saying which header."""

    description = (
        "The Host header does not name a valid host: each dot-separated label has 1 to 63 characters."
    )


class NoSuchPath(NotFound):
    """404 for a path the router matched but the service does not serve, as the router answers one
    it does not match: a doubled leading slash (`//plants`), an asset the API page does not have."""


class MethodNotServed(MethodNotAllowed):
    """405 whose `Allow` names the methods the path serves, as its OPTIONS answer does: the
    router's own names every method of the path's rules, those a rule refuses included."""


class PlantNotFound(NotFound):
    def __init__(self, plant_id: int) -> None:
        super().__init__(f"There is no plant with id {plant_id}.")


class PlantConflict(Conflict):
    """A create of an id the store holds with another name or tag (the same one is idempotent)."""

    def __init__(self, plant_id: int) -> None:
        super().__init__(f"A plant with id {plant_id} already exists with a different name or tag.")


class PlantChangedSinceRead(PreconditionFailed):
    """412 for a read whose If-Match the plant no longer matches."""

    description = (
        "The plant does not match If-Match: it was changed since you read it. Read it"
        " without If-Match for its current ETag."
    )


class PageChangedSinceRead(PreconditionFailed):
    """412 for a read of a page (of plants, of the feed) or a watch whose If-Match it does not match."""

    description = (
        "The page does not match If-Match: it changed since you read it (a watch of the feed has"
        " no ETag, so only 'If-Match: *' holds there). Read it without If-Match for its current ETag."
    )


class FileChangedSinceRead(PreconditionFailed):
    """412 for a read of one of the API page's files whose If-Match it does not match."""

    description = (
        "The file does not match If-Match: another version of the service serves another one."
        " Read it without If-Match for its current ETag."
    )


class ScrapePreconditionFailed(PreconditionFailed):
    """412 for a scrape of /metrics under an If-Match other than `*`: a scrape has no ETag."""

    description = (
        "The metrics do not match If-Match: a scrape has no ETag (every one differs), so only"
        " 'If-Match: *' holds. Scrape without If-Match."
    )


class PlantPreconditionFailed(PreconditionFailed):
    """412 for a write whose If-Match or If-None-Match the plant does not satisfy; nothing changed.
    `absent`: an If-Match for a plant that is not there (a PUT that would have created it).
    `none_match`: the write sent If-None-Match alone, and the stored plant fails it: `*` (any
    plant stored) or `tag` (its ETag is listed), not a change since the client read it."""

    def __init__(self, plant_id: int, *, absent: bool = False, none_match: str | None = None) -> None:
        if absent:
            super().__init__(
                f"There is no plant with id {plant_id} to match If-Match: nothing was created. Send"
                " it without If-Match (or with If-None-Match: *) to create it."
            )
            return
        if none_match == "*":
            super().__init__(
                f"A plant with id {plant_id} is stored, and 'If-None-Match: *' holds only where none"
                " is (it makes a PUT or POST create only): nothing changed. To change the stored"
                " plant, send If-Match with its ETag (GET) instead."
            )
            return
        if none_match == "tag":
            super().__init__(
                f"The plant with id {plant_id} has an ETag that If-None-Match lists, so the"
                " precondition fails: nothing changed."
            )
            return
        super().__init__(
            f"The plant with id {plant_id} does not match the request's precondition (If-Match or"
            " If-None-Match): it was changed, created or deleted since you read it. Nothing changed;"
            " read it again (GET) for its current ETag."
        )


class TicketPreconditionFailed(PreconditionFailed):
    """412 for a mint of a watch ticket under If-Match: there is no current ticket to match."""

    description = (
        "There is no current watch ticket to match If-Match: each POST /events/tickets mints a new"
        " one, and none was minted. Send it without If-Match."
    )


class ConditionalRequestRequired(PreconditionRequired):
    """428 for a write without a precondition where PLANTS_REQUIRE_IF_MATCH asks for one."""

    description = (
        "This service requires a conditional request: send If-Match with the plant's ETag"
        ' (from GET), or "If-None-Match: *" to create with PUT.'
    )


class _BearerChallenge(HTTPException):
    """Adds the RFC 6750 `WWW-Authenticate: Bearer` challenge to the response.

    `reason` names the refusal in the metrics (`plants_auth_refusals_total{reason}`); a JWT
    refusal also says which check failed (`error_description`) and which scope was needed.
    """

    oauth_error: str | None = None

    def __init__(
        self,
        description: str,
        *,
        reason: str,
        error_description: str | None = None,
        scope: str | None = None,
    ) -> None:
        super().__init__(description)
        self.reason = reason
        # Fixed texts of this module's callers: never a token, and never a quote or backslash.
        self.challenge = f'Bearer realm="{REALM}"'
        if self.oauth_error:
            self.challenge += f', error="{self.oauth_error}"'
        if error_description:
            self.challenge += f', error_description="{error_description}"'
        if scope:
            self.challenge += f', scope="{scope}"'

    def get_headers(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        return [*super().get_headers(*args, **kwargs), ("WWW-Authenticate", self.challenge)]


class MissingCredentials(_BearerChallenge, Unauthorized):
    """No bearer credentials at all: the challenge carries no error (RFC 6750 §3.1)."""


class InvalidToken(_BearerChallenge, Unauthorized):
    oauth_error = "invalid_token"


class MalformedCredentials(_BearerChallenge, BadRequest):
    oauth_error = "invalid_request"


class MalformedTicket(InvalidParameters):
    """A `ticket` parameter that is not of a watch ticket's form where it is the request's
    credential (no `Authorization`): 400 naming it, as any malformed parameter is, with RFC 6750's
    `invalid_request` challenge, as a malformed bearer token has (MalformedCredentials)."""

    reason = "ticket_malformed"
    challenge = f'Bearer realm="{REALM}", error="invalid_request"'

    def __init__(self, problems: list[str]) -> None:
        super().__init__({"ticket": problems})

    def get_headers(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        return [*super().get_headers(*args, **kwargs), ("WWW-Authenticate", self.challenge)]


class InsufficientScope(_BearerChallenge, Forbidden):
    """A read-only token on a write, or a JWT without the operation's scope (RFC 6750 §3.1)."""

    oauth_error = "insufficient_scope"


class InsufficientStorage(HTTPException):
    """507: the store is at capacity (Werkzeug has no class for this status)."""

    code = 507
    description = "The store is full: it cannot take a new plant, or (at Redis's maxmemory) this change."


class InvalidChange(InvalidFields):
    """A body that is JSON but not a valid Plant (PUT) or merge patch (PATCH)."""

    def __init__(self, record: str, details: dict[str, list[str]]) -> None:
        super().__init__(f"The request body is not a valid {record}.", "fields", details)


#: The media type of a JSON merge patch (RFC 7396), which PATCH takes.
MERGE_PATCH = "application/merge-patch+json"


class UnsupportedPatch(UnsupportedMediaType):
    """415 for a PATCH body of another type, saying which one to send (RFC 5789 §2.2)."""

    def get_headers(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        return [*super().get_headers(*args, **kwargs), ("Accept-Patch", MERGE_PATCH)]


class EncodedBody(UnsupportedMediaType):
    """415 for a body in a content coding (gzip, br, ...): the service reads bodies as sent, so
    it says which coding it takes (RFC 9110 §15.5.16) rather than read compressed bytes as JSON."""

    def __init__(self, coding: str) -> None:
        named = _quoted(coding, otherwise="its content coding")
        super().__init__(f"The request body is sent in {named}: send it unencoded (identity).")

    def get_headers(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        return [*super().get_headers(*args, **kwargs), ("Accept-Encoding", "identity")]


class EncodedPatch(EncodedBody, UnsupportedPatch):
    """EncodedBody for a PATCH, which names the patch type too (`Accept-Patch`)."""


class TransferCodedBody(NotImplemented):
    """501 for a body in a transfer coding other than chunked (`Transfer-Encoding: gzip, chunked`),
    as the packaged worker's parser answers (RFC 9112 §6.1). gunicorn's gthread parser takes gzip,
    deflate and compress, takes the chunks off and hands the app the bytes still coded."""

    def __init__(self, coding: str) -> None:
        named = _quoted(coding, otherwise="a transfer coding")
        super().__init__(
            f"The request body is sent in {named}: the only transfer coding served is chunked; send it"
            " unencoded."
        )


def _quoted(coding: str, *, otherwise: str) -> str:
    """A coding as an error names it: quoted when it is an HTTP token (RFC 9110 §5.6.2), short;
    else `otherwise`, so that no odd bytes a client sent are written back."""
    return f"'{coding}'" if _TOKEN.fullmatch(coding) else otherwise


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}")


class MetricsOff(NotFound):
    description = "Metrics are turned off (PLANTS_METRICS)."


class DocsOff(NotFound):
    description = "The API page is turned off (PLANTS_DOCS)."


class StoreNotAnswering(ServiceUnavailable):
    """A store call that failed (app/store/: StoreUnavailableError); the client may retry."""

    def __init__(self) -> None:
        super().__init__("The plant store is not answering right now; retry shortly.", retry_after=1)


class StoreReadOnly(ServiceUnavailable):
    """A write met a read-only replica (Redis's READONLY, redis-py's ReadOnlyError), which refused
    it whole. A retry meets the same replica: only its operator can act, so it says so, and not
    "retry shortly"."""

    def __init__(self) -> None:
        super().__init__(
            "The plant store is a read-only replica, which takes none of this request's writes (a change,"
            " or a rate limit's count): retries meet the same refusal until its operator points the"
            " service at the primary (PLANTS_STORE_URL). Nothing was changed.",
            retry_after=60,
        )


class StoreNeedsMigration(ServiceUnavailable):
    def __init__(self) -> None:
        super().__init__(
            "The plant store must be upgraded by its operator before it can list plants.", retry_after=60
        )


class StoreEvicted(ServiceUnavailable):
    """Redis evicted keys of the store (an `allkeys-*` maxmemory-policy), among them the mark that
    pages need: retries meet the same refusal, and the migration, which writes the mark again,
    helps only once Redis keeps every key and has room for the indexes."""

    def __init__(self) -> None:
        super().__init__(
            "The plant store cannot list plants: Redis evicted some of its keys at its maxmemory, as its"
            " maxmemory-policy allowed, and stored plants may be lost. Its operator must set"
            " maxmemory-policy noeviction and give Redis room under its maxmemory, then run"
            " `python -m app.store.migrate` once.",
            retry_after=60,
        )


class StoreValueUnreadable(ServiceUnavailable):
    """A stored plant (or event) not encoded as the service writes them; nothing was written."""

    def __init__(self) -> None:
        super().__init__(
            "The plant store holds a value for this request that the service cannot read (it did not write it"
            " so); nothing was changed. Its operator must repair it: the service's log names the key.",
            retry_after=60,
        )


class ReplicasDidNotConfirm(ServiceUnavailable):
    def __init__(self) -> None:
        super().__init__(
            "The plant store's replicas did not confirm the write in time; retry shortly"
            " (a create that did land answers 200 again).",
            retry_after=1,
        )


class FeedOff(NotFound):
    description = "The change feed is turned off (PLANTS_EVENTS_RETAIN=0)."


class FeedPositionExpired(Gone):
    description = (
        "Some events after this position are no longer kept. List the plants again from the start"
        " (GET /plants), then follow the feed from a new position (GET /events?after=now, taken"
        " before the listing)."
    )


class TooManyWatchers(ServiceUnavailable):
    """This process holds as many watchers of the feed as it may (PLANTS_EVENTS_MAX_WATCHERS)."""

    def __init__(self) -> None:
        super().__init__(
            "This server holds as many watchers of the feed as it may; retry shortly, or poll.",
            retry_after=5,
        )


class TooManyWatchersForToken(TooManyRequests):
    """The token has as many watches open here as it may (PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"This token already has {limit} watches of the feed open here, the most allowed"
            " (PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN): close one first.",
            retry_after=5,
        )


class InvalidWebhook(InvalidFields):
    """A webhook endpoint's body that is JSON but not valid (`url`, `events`, `description`,
    `status`), or a replay's `after`."""

    def __init__(self, record: str, details: dict[str, list[str]]) -> None:
        super().__init__(f"The request body is not a valid {record}.", "fields", details)


class WebhookNotFound(NotFound):
    def __init__(self, endpoint_id: str) -> None:
        super().__init__(f"There is no webhook endpoint with id {endpoint_id!r}.")


class WebhookStoreFull(InsufficientStorage):
    description = (
        "The store is full (Redis is at its maxmemory): it cannot take this change to a webhook"
        " endpoint until Redis has room. Deleting plants or endpoints makes room."
    )


class WebhooksFull(InsufficientStorage):
    """507 for a registration at PLANTS_WEBHOOKS_MAX. `registered` may be past `limit`: a limit
    lowered by a reload, or another host sharing the store with a higher one."""

    def __init__(self, limit: int, registered: int) -> None:
        kept = f"{registered} webhook endpoint{' is' if registered == 1 else 's are'} registered"
        if limit == 0:
            advice = "keeps none (PLANTS_WEBHOOKS_MAX=0): it takes no more."
        else:
            excess = max(1, registered - limit + 1)
            advice = f"keeps at most {limit} (PLANTS_WEBHOOKS_MAX): delete {excess} first."
        super().__init__(f"{kept}, and this service {advice}")


class WebhooksNeedFeed(Conflict):
    description = (
        "Webhooks deliver the change feed's events, and the feed is turned off (PLANTS_EVENTS_RETAIN=0)."
    )


class WebhookSecretsFull(Conflict):
    """A rotation that would make one more rotated-out secret sign than the setting allows."""

    def __init__(self, limit: int, oldest_until: str) -> None:
        super().__init__(
            f"{limit} rotated-out secrets of this endpoint still sign, the most kept"
            f" (PLANTS_WEBHOOKS_OLD_SECRETS_MAX); nothing changed. The oldest stops signing at"
            f" {oldest_until}: rotate again after that."
        )


class WebhookHostNotResolvedInTime(ServiceUnavailable):
    """The URL's host is not resolved yet (app/webhooks/lookups.py), so its addresses are not
    checked and the endpoint is not registered: the lookup goes on, and a retry finds it."""

    def __init__(self, host: str, busy: bool) -> None:
        if busy:
            why = "another host name of this client's, or too many others, are being resolved"
        else:
            why = "it is being resolved"
        super().__init__(
            f"The host {host} could not be checked yet: {why}. Nothing changed; retry after"
            " Retry-After seconds.",
            retry_after=5 if busy else 2,
        )


class WebhookPreconditionFailed(PreconditionFailed):
    """An endpoint has no entity-tag: a conditional change holds only with `If-Match: *`."""

    def __init__(self, endpoint_id: str) -> None:
        super().__init__(
            f"The webhook endpoint {endpoint_id!r} does not match the request's precondition (If-Match"
            " or If-None-Match): endpoints have no ETag, so only 'If-Match: *' holds, and"
            " 'If-None-Match: *' never does for an endpoint that exists. Nothing changed."
        )


class WebhookRegistrationPreconditionFailed(PreconditionFailed):
    """412 for a registration under If-Match: the endpoint it makes has no current representation."""

    description = (
        "There is no webhook endpoint to match If-Match: each POST /webhooks registers a new one,"
        " under an id the service picks. Nothing was registered; send it without If-Match."
    )


class WebhookReadPreconditionFailed(PreconditionFailed):
    """412 for a read of an endpoint, of their list or of an endpoint's attempts whose If-Match is not `*`."""

    description = (
        "Webhook endpoints have no ETag (an endpoint's answer changes with its deliveries, and is"
        " never kept by a cache): only 'If-Match: *' holds. Read it without If-Match."
    )


class WebhookChanged(Conflict):
    description = "The webhook endpoint was changed by another request meanwhile; send the change again."


class RateLimitExceeded(TooManyRequests):
    """429, with the limit's headers (Retry-After among them)."""

    def __init__(self, description: str, headers: list[tuple[str, str]]) -> None:
        super().__init__(description)
        self.limit_headers = headers

    def get_headers(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        return [*super().get_headers(*args, **kwargs), *self.limit_headers]


class KeysNotLoaded(ServiceUnavailable):
    reason = "keys_unavailable"
    description = "The identity provider's signing keys are not loaded yet; retry shortly."

    def __init__(self) -> None:
        super().__init__(retry_after=2)


#: Built once for the bearer check, which answers it to every JWT until the keys are loaded.
KEYS_NOT_LOADED = KeysNotLoaded()


class NotReady(ServiceUnavailable):
    """`/readyz` when no plant operation can succeed, with the reason (no address, no password)."""

    def __init__(self, why: str, retry_after: int = 1) -> None:
        super().__init__(f"Not ready: {why}.", retry_after=retry_after)


class SplitStoreRefused(ServiceUnavailable):
    """A process that refuses its plant operations (app/http/split_guard.py): 503, as its
    `/readyz` is, so that clients and load balancers go to another instance."""

    def __init__(self) -> None:
        super().__init__(
            "The service is misconfigured and refuses to serve; its log says why.", retry_after=60
        )


class SplitMetricsRefused(InternalServerError):
    description = (
        "Metrics are not available: this server runs several worker processes without "
        "PROMETHEUS_MULTIPROC_DIR, so one worker's counts would be reported as the total."
    )
