"""One log format for everything a process writes: gunicorn's error log, its access log, the
service's own lines and the standalone deliverer's. PLANTS_LOG_FORMAT chooses it:

- `text` (the default): `<time> [<pid>] [<LEVEL>] <logger>: <message>`, and ` request_id=<id>` on
  a request's lines;
- `json`: one object a line, with `time`, `level`, `logger`, `message` and, on a request's lines,
  `request_id`, `method`, `route` (the rule, not the path) and `token` (its kind, never its value);
  the access line adds `status` and `duration_ms`.

Times are RFC 3339 in UTC with milliseconds. The JSON is python-json-logger's (with orjson).
gunicorn takes the configuration as its documented `logconfig_dict` (logging_config).
"""

from __future__ import annotations

import logging
import logging.config
import math
import sys
from datetime import UTC, datetime
from typing import Any

from flask import has_request_context, request
from pythonjsonlogger.orjson import OrjsonFormatter

from app.compat import release_warnings
from app.telemetry.context import CALLER_KIND, REQUEST_ID, ROUTE
from app.telemetry.redact import holds_secret, scrub, scrub_line

FORMATS = ("text", "json")


#: The last second `rfc3339` wrote out, and its text: a line's date and time are made once a second.
_second: tuple[int, str] = (0, "1970-01-01T00:00:00")


def rfc3339(timestamp: float) -> str:
    """`timestamp` in UTC with milliseconds, as `datetime.fromtimestamp(timestamp, UTC)` writes it
    (rounded to the microsecond half to even, then cut to the millisecond)."""
    global _second
    fraction, whole = math.modf(timestamp)
    micro = round(fraction * 1e6)
    if micro >= 1_000_000:
        whole, micro = whole + 1, micro - 1_000_000
    elif micro < 0:
        whole, micro = whole - 1, micro + 1_000_000
    second, text = _second
    if second != whole:
        second = int(whole)
        text = datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")[:-6]
        _second = (second, text)
    return f"{text}.{micro // 1000:03d}Z"


class RequestFilter(logging.Filter):
    """Adds the fields of the request this thread serves, if any, to a record that lacks them.

    The request is Flask's (its context is a context variable of Flask's own), so a request pays
    for its fields only when one of its lines is logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id") and has_request_context():
            fields = request_fields(request.environ)
            if "route" not in fields and request.url_rule is not None:
                fields["route"] = request.url_rule.rule
            for name, value in fields.items():
                setattr(record, name, value)
        return True


def request_fields(environ: dict[str, Any]) -> dict[str, Any]:
    """A request's own log fields, from its environ."""
    fields: dict[str, Any] = {"request_id": environ.get(REQUEST_ID), "method": environ.get("REQUEST_METHOD")}
    route = environ.get(ROUTE)
    if route is not None:
        fields["route"] = route
    kind = environ.get(CALLER_KIND)
    if kind is not None:
        fields["token"] = kind
    return fields


class TicketFilter(logging.Filter):
    """Replaces any watch ticket (app/auth/watch_tickets.py) in a line, and whatever else the access
    line hides: gunicorn's own error lines name a failed request's URI, query included, and Werkzeug's
    development server writes each request's line (on its `werkzeug` logger, under `flask run`).
    gunicorn's access lines are scrubbed where they are made."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "gunicorn.access":
            message = record.getMessage()
            if holds_secret(message) or "#" in message:  # a request line's fragment too
                record.msg, record.args = scrub_line(message), None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text and holds_secret(record.exc_text):
                record.exc_text = scrub(record.exc_text)
        return True


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("[%(process)d] [%(levelname)s] %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = f"{rfc3339(record.created)} {super().format(record)}"
        request_id = getattr(record, "request_id", None)
        return f"{line} request_id={request_id}" if request_id else line


class JsonFormatter(OrjsonFormatter):
    def __init__(self) -> None:
        super().__init__(
            "levelname,name,message", style=",", rename_fields={"levelname": "level", "name": "logger"}
        )

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_data["time"] = rfc3339(record.created)
        super().add_fields(log_data, record, message_dict)


def logging_config(log_format: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` (and gunicorn `logconfig_dict`) of one handler on stdout for
    every logger, gunicorn's included, in `log_format`."""
    formatter = (
        "app.telemetry.logs.JsonFormatter" if log_format == "json" else "app.telemetry.logs.TextFormatter"
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "request": {"()": "app.telemetry.logs.RequestFilter"},
            "tickets": {"()": "app.telemetry.logs.TicketFilter"},
        },
        "formatters": {"plants": {"()": formatter}},
        "handlers": {
            "plants": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stdout",
                "formatter": "plants",
                "filters": ["request", "tickets"],
            }
        },
        "root": {"level": "INFO", "handlers": ["plants"]},
        # gunicorn's own loggers reach the root's handler, and only it.
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "INFO", "handlers": [], "propagate": True},
        },
    }


def service_handler(log_format: str) -> logging.Handler:
    """`logging_config`'s handler, made for a process whose root logger is not the service's."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(RequestFilter())
    handler.addFilter(TicketFilter())
    return handler


def configure(log_format: str) -> None:
    """The format for a process that gunicorn does not start (the standalone deliverer)."""
    logging.config.dictConfig(logging_config(log_format))
    release_warnings()
