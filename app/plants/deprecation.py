"""Deprecated operations, announced from the served document alone (docs/versions.md).

An operation marked `deprecated: true` in app/plants/openapi.yaml, with the date it was deprecated
(`x-deprecated-since`) and, once it is set, the date it stops being served (`x-sunset`), answers
every request with:

- `Deprecation: @<seconds>` (RFC 9745): since when;
- `Sunset: <HTTP-date>` (RFC 8594): until when, when `x-sunset` is set;
- `Link: <…>; rel="deprecation"`: where to read about it, `x-deprecation-link` or the document;

and each such request is counted in `plants_deprecated_requests_total{operation}`, so an operator
sees who still calls it before the sunset. Nothing else is needed: the table below is read from the
document once, kept in each app's state as it registers the blueprint, and is empty (one truth
test an answer) while nothing is deprecated.
"""

from __future__ import annotations

import calendar
import datetime
import functools
from email.utils import format_datetime
from typing import Any

from flask import request, url_for

from app.plants import docs
from app.plants.routes import ROUTES

#: An operation's id, by its view's name and method (a HEAD is its GET's).
_OPERATIONS = {
    (route.view.__name__, route.method): route.operation_id for route in ROUTES if route.operation_id
}


class DocumentError(ValueError):
    """The document's deprecations break docs/versions.md's rules: one line that says which."""


def _moment(value: Any, field: str, operation_id: str) -> datetime.datetime:
    """A date (or date-time) of the document as an aware UTC datetime."""
    if isinstance(value, str):
        value = datetime.date.fromisoformat(value)
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    if isinstance(value, datetime.date):
        return datetime.datetime(value.year, value.month, value.day, tzinfo=datetime.UTC)
    raise DocumentError(f"{operation_id} is deprecated: {field} must be a date (YYYY-MM-DD), not {value!r}")


def _six_months_after(moment: datetime.datetime) -> datetime.datetime:
    """The same day six calendar months later (the month's last day where it has fewer days)."""
    months = moment.month - 1 + 6
    year, month = moment.year + months // 12, months % 12 + 1
    return moment.replace(year=year, month=month, day=min(moment.day, calendar.monthrange(year, month)[1]))


def headers_of(operation: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The headers that announce one deprecated operation of the document. A sunset earlier than
    six months after the deprecation raises DocumentError: docs/versions.md promises clients that."""
    operation_id = operation.get("operationId", "?")
    since = _moment(operation.get("x-deprecated-since"), "x-deprecated-since", operation_id)
    headers = [("Deprecation", f"@{int(since.timestamp())}")]
    if "x-sunset" in operation:
        sunset = _moment(operation["x-sunset"], "x-sunset", operation_id)
        earliest = _six_months_after(since)
        if sunset < earliest:
            raise DocumentError(
                f"{operation_id} is deprecated: its x-sunset {sunset.date()} is earlier than six"
                f" months after its x-deprecated-since {since.date()} (docs/versions.md);"
                f" the earliest is {earliest.date()}"
            )
        headers.append(("Sunset", format_datetime(sunset, usegmt=True)))
    link = operation.get("x-deprecation-link")
    if link:
        headers.append(("Link", f'<{link}>; rel="deprecation"; type="text/html"'))
    return tuple(headers)


@functools.cache
def table() -> dict[tuple[str, str], tuple[str, tuple[tuple[str, str], ...]]]:
    """(view name, method) -> (operation id, headers) of every deprecated operation. A deprecated
    operation without its date stops the app's start: an announcement needs one."""
    deprecated = {}
    for item in docs.shipped_document()["paths"].values():
        for method, operation in item.items():
            if isinstance(operation, dict) and operation.get("deprecated") and method != "head":
                deprecated[operation["operationId"]] = headers_of(operation)
    found = {key: (operation_id, deprecated[operation_id]) for key, operation_id in _OPERATIONS.items()
             if operation_id in deprecated}  # fmt: skip
    unknown = set(deprecated) - {operation_id for operation_id, _ in found.values()}
    if unknown:
        raise DocumentError(f"deprecated operations the service does not route: {sorted(unknown)}")
    return found


def prepare(announcements: dict[tuple[str, str], Any]) -> None:
    """At the blueprint's registration: an app's announcements (its state's `deprecated`), read
    from the document (a deprecated operation without its date raises DocumentError, and the app
    does not start)."""
    announcements.update(table())


def announce(
    announcements: dict[tuple[str, str], Any], view: str | None, method: str, response: Any
) -> str | None:
    """Add the announcement to `response` when its operation is deprecated; the operation's id.
    `view` is the request's view as Flask names it (`request.endpoint`: the blueprint's, a dot, the
    view's)."""
    if view is None:
        return None
    found = announcements.get((view.rpartition(".")[2], "GET" if method == "HEAD" else method))
    if found is None:
        return None
    operation_id, headers = found
    for name, value in headers:
        response.headers.add(name, value)
    if not any(name == "Link" for name, _ in headers):
        document = url_for(f"{request.blueprint}.openapi")  # the served document says what is deprecated
        response.headers.add("Link", f'<{document}>; rel="deprecation"; type="application/json"')
    return operation_id
