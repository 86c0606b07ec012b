"""marshmallow schemas for the path and query parameters: a plant's `id`, a page's query, and a
page of the change feed's query."""

from __future__ import annotations

import re
from typing import Any, ClassVar
from urllib.parse import unquote_to_bytes

from marshmallow import RAISE, Schema, ValidationError, fields, validate
from werkzeug.datastructures import MultiDict

from app.errors import InvalidParameters
from app.http import strict_json
from app.schemas.records import INT64_MAX, INT64_MIN, TAG_MAX_LENGTH
from app.schemas.refused import Refused
from app.settings.schema import LONGEST_WAIT
from app.store import EVENT_TYPES

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_TAGS = 20
#: The most plant ids one watch of the feed may name.
MAX_IDS = 100
#: A cursor is 28 base64url characters today; the bound leaves room for another version.
MAX_CURSOR_LENGTH = 64
#: A feed cursor is up to 50 characters on one Redis, up to about 400 on a cluster (24 feeds).
MAX_EVENTS_CURSOR_LENGTH = 1400

_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]{0,18})")
#: A byte past ASCII, percent-encoded or not: only a query holding one can hold a value that is not
#: UTF-8.
_PAST_ASCII = re.compile(rb"%[89A-Fa-f][0-9A-Fa-f]|[\x80-\xff]")
NOT_UTF8 = "Not UTF-8 once percent-decoded: percent-encode each character as its UTF-8 bytes (é is %C3%A9)."
#: A watch ticket's form (app/auth/watch_tickets.py), as the document's pattern says.
_TICKET_FORM = r"^plwt_[A-Za-z0-9_-]{1,200}\Z"
NOT_A_TICKET = "Not a watch ticket of this service."
#: A flag of the query takes these two words only (the settings' `1`, `yes`, `on` are not read here).
_FLAG: dict[str, str | list[Any] | dict[Any, Any]] = {"invalid": "Must be `true` or `false`."}


class IntegralNumber(fields.Integer):
    """An integer written as a JSON number, read as a NewPlant's `id` is: `100`, `1e2` and `100.0`
    are 100, exactly; `1.5`, `+1`, ` 1`, `0x10`, `007` and `1_0` are refused (Python's int()
    would take some of them)."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> int:
        number = strict_json.integral_number(value) if isinstance(value, str) else None
        if number is None:
            raise self.make_error("invalid")
        return super()._deserialize(number, attr, data, **kwargs)


class PlantIdSchema(Schema):
    """The `{id}` of `/plants/{id}`: an int64."""

    id = IntegralNumber(required=True, validate=validate.Range(min=INT64_MIN, max=INT64_MAX))


class DistinctList(fields.List):
    """A repeatable filter's values, each once, in the order first given: a filter is a set, so
    a value repeated is counted once against the parameter's bound (its validators read this)."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> tuple[Any, ...]:  # type: ignore[override]
        return tuple(dict.fromkeys(super()._deserialize(value, attr, data, **kwargs)))


def _at_most(count: int, values: str) -> validate.Length:
    """A repeatable filter's bound on its distinct values, said as a count of them: marshmallow's
    own `Length must be between 1 and 20.` read as a tag's length in characters."""
    return validate.Length(
        min=1, max=count, error=f"At most {count} distinct {values} (a value given twice counts once)."
    )


def _tags_field() -> fields.List:
    """`tags`, as `GET /plants` and `GET /events` take it: 1 to MAX_TAGS distinct tags of 1 to 100
    characters."""
    return DistinctList(
        fields.String(validate=validate.Length(min=1, max=TAG_MAX_LENGTH)),
        validate=_at_most(MAX_TAGS, "tags"),
    )


class PageQuerySchema(Schema):
    """The query of `GET /plants`. Unknown parameters are refused, never ignored."""

    class Meta:
        unknown = RAISE

    error_messages: ClassVar[dict[str, str]] = {"unknown": "Unknown parameter."}  # type: ignore[misc]

    limit = IntegralNumber(load_default=DEFAULT_LIMIT, validate=validate.Range(min=1, max=MAX_LIMIT))
    after = fields.String(validate=validate.Regexp(rf"^[A-Za-z0-9_-]{{1,{MAX_CURSOR_LENGTH}}}\Z"))
    tags = _tags_field()
    #: A watch ticket beside the token (the ticket a page's watch took): unknown here, and told
    #: where it goes, as the 401 without a token is (app/auth/static.py).
    ticket = Refused(
        "Unknown parameter: a watch ticket opens only the watch of the feed, GET /events?ticket=..."
        " (a stream or a long-poll). This operation reads the token of the Authorization header:"
        " leave the ticket out."
    )


#: The longest long-poll, in seconds: PLANTS_EVENTS_MAX_WAIT only lowers it.
MAX_WAIT = LONGEST_WAIT


class EventsQuerySchema(Schema):
    """The query of `GET /events`. Unknown parameters are refused, never ignored."""

    class Meta:
        unknown = RAISE

    error_messages: ClassVar[dict[str, str]] = {"unknown": "Unknown parameter."}  # type: ignore[misc]

    limit = IntegralNumber(load_default=DEFAULT_LIMIT, validate=validate.Range(min=1, max=MAX_LIMIT))
    #: A long-poll: seconds to wait for an event when none is there (under nginx's 60 s timeout).
    wait = IntegralNumber(validate=validate.Range(min=1, max=MAX_WAIT))
    #: A watch ticket (app/auth/watch_tickets.py), checked by the guard before the query is read; here
    #: only its form, as the document's pattern says.
    ticket = fields.String(validate=validate.Regexp(_TICKET_FORM, error=NOT_A_TICKET))
    after = fields.String(
        validate=validate.Regexp(
            rf"^(?:now|[A-Za-z0-9_-]{{1,{MAX_EVENTS_CURSOR_LENGTH}}})\Z",
            error="Must be `now` or the `next` of a page of events.",
        )
    )
    #: Filters (app/watch/filters.py): each repeatable, combined with AND.
    tags = _tags_field()
    ids = DistinctList(
        IntegralNumber(validate=validate.Range(min=INT64_MIN, max=INT64_MAX)),
        validate=_at_most(MAX_IDS, "ids"),
    )
    types = DistinctList(
        fields.String(validate=validate.OneOf(EVENT_TYPES, error="Must be one of: {choices}.")),
        validate=_at_most(len(EVENT_TYPES), "types"),
    )
    #: A stream whose heartbeats are bookmarks (a filtered stream's always are).
    bookmarks = fields.Boolean(truthy={"true"}, falsy={"false"}, error_messages=_FLAG)
    #: A stream that starts with every matching plant (`plant.existing`), then follows the feed.
    snapshot = fields.Boolean(truthy={"true"}, falsy={"false"}, error_messages=_FLAG)


_plant_id_schema = PlantIdSchema()
_page_query_schema = PageQuerySchema()
_events_query_schema = EventsQuerySchema()
#: Parameters that may be repeated (`?tags=fern&tags=palm`, the form style of OpenAPI).
_LISTS = frozenset({"tags", "ids", "types"})


def _flat(messages: dict[str, Any]) -> dict[str, list[str]]:
    """marshmallow's messages with a list's per-item messages (`{0: [...]}`) written out."""
    flat = {}
    for name, value in messages.items():
        if isinstance(value, dict):
            value = [f"Value {index + 1}: {text}" for index, texts in sorted(value.items()) for text in texts]
        flat[name] = value
    return flat


def load_plant_id(value: str) -> int:
    """The path's plant id; InvalidParameters naming `id` when it is not an int64."""
    if _DECIMAL.fullmatch(value):  # plain digits within 19: the common case, without marshmallow's loop
        plant_id = int(value)
        if INT64_MIN <= plant_id <= INT64_MAX:
            return plant_id
    try:
        return _plant_id_schema.load({"id": value})["id"]
    except ValidationError as exc:
        raise InvalidParameters(exc.normalized_messages()) from None


def load_page_query(args: MultiDict[str, str], query: bytes) -> dict[str, Any]:
    """The page query (`args`, parsed from the raw `query`): `limit` (default 100), `after` when
    given, `tags` (deduplicated) when given.

    Raises InvalidParameters naming every bad parameter: one given twice that may not be, a
    value out of bounds or not UTF-8, or an unknown name.
    """
    return _load_query(_page_query_schema, args, query)


def load_events_query(args: MultiDict[str, str], query: bytes) -> dict[str, Any]:
    """The feed's query: `limit` (default 100), `after` (a cursor, or `now`), `wait`, the filters
    (`tags`, `ids`, `types`, each deduplicated) and `snapshot` when given; InvalidParameters as
    for a page."""
    return _load_query(_events_query_schema, args, query)


def ticket_problems(ticket: str, query: bytes) -> list[str]:
    """Why the `ticket` parameter's value (parsed from the raw `query`) is not of a watch ticket's
    form, as the query's load would say it: no UTF-8, or not the form; none when it is."""
    if "ticket" in _not_utf8(query):
        return [NOT_UTF8]
    return [] if re.match(_TICKET_FORM, ticket) else [NOT_A_TICKET]


def _not_utf8(query: bytes) -> set[str]:
    """The names of the parameters of the raw `query` with a value that is not UTF-8 once
    percent-decoded. werkzeug keeps such bytes percent-encoded in the value it parses (`?tags=%ff`
    reads as the tag `%FF`, which `?tags=%25FF` means), so the value would be taken as another."""
    if not _PAST_ASCII.search(query):
        return set()
    names = set()
    for pair in query.split(b"&"):
        name, _, value = pair.partition(b"=")
        try:
            unquote_to_bytes(value).decode()
        except UnicodeDecodeError:
            names.add(unquote_to_bytes(name.replace(b"+", b" ")).decode(errors="replace"))
    return names


def _load_query(schema: Schema, args: MultiDict[str, str], query: bytes) -> dict[str, Any]:
    data: dict[str, Any] = {}
    # A known parameter's value that is not UTF-8 is refused as such: werkzeug's parse of it is
    # not what was sent, so it is not checked further. An unknown name is refused as unknown.
    errors = {name: [NOT_UTF8] for name in _not_utf8(query) if name in schema.fields}
    for name, values in args.lists():
        if name in errors:
            continue
        if name in _LISTS:
            data[name] = values
        elif len(values) > 1:
            errors[name] = ["Given more than once."]
        else:
            data[name] = values[0]
    try:
        loaded = schema.load(data)
    except ValidationError as exc:
        errors.update(_flat(exc.normalized_messages()))
    if errors:
        raise InvalidParameters(errors)
    return loaded
