"""The settings of the packaged gunicorn configuration (app/server/gunicorn_conf.py), declared
like the service's own: each environment variable, its type, default and least value."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from marshmallow import Schema

from app.settings.errors import ConfigurationError, closest_name
from app.settings.fields import Setting


class ServerNumber(Setting):
    """A number read from the environment as `convert` reads it, at least `minimum`."""

    def __init__(self, default: str | None, convert: Callable[[str], Any], kind: str, minimum: float) -> None:
        super().__init__(default)
        self.convert, self.kind, self.minimum = convert, kind, minimum

    def from_text(self, text: str) -> Any:
        try:
            value = self.convert(text)
        except ValueError:
            value = None
        if value is None or value < self.minimum:
            raise ValueError(f"must be {self.kind} >= {self.minimum:g}, not {text!r}")
        return value


class ServerSettingsSchema(Schema):
    #: gunicorn's own convention; the in-memory store allows only 1.
    WEB_CONCURRENCY = ServerNumber("1", int, "a whole number", 1)
    GUNICORN_BIND = Setting("127.0.0.1:8000")
    #: Unset: 1 with the in-memory store, 2 with a shared one (gunicorn_conf.py says why).
    #: The packaged worker; `gthread` (gunicorn's stock threaded worker) or any worker class name.
    GUNICORN_WORKER_CLASS = Setting("app.server.worker.ThreadWorker")
    GUNICORN_THREADS = ServerNumber(None, int, "a whole number", 1)
    GUNICORN_READ_TIMEOUT = ServerNumber("10", float, "a number of seconds", 0.1)
    GUNICORN_KEEPALIVE = ServerNumber("75", int, "a whole number of seconds", 0)
    GUNICORN_GRACEFUL_TIMEOUT = ServerNumber("30", int, "a whole number of seconds", 0)
    FORWARDED_ALLOW_IPS = Setting("")


#: The declared server settings, by name.
SERVER_FIELDS: dict[str, Setting] = ServerSettingsSchema().fields  # type: ignore[assignment]
#: gunicorn's own variable, read by gunicorn itself: known, so not "misspelled".
_GUNICORN_OWN = ("GUNICORN_CMD_ARGS",)


def server_setting(name: str, environ: Mapping[str, str] = os.environ, default: str | None = None) -> Any:
    """The server setting `name` from `environ` (else `default`, else its declared default), read
    as its type; ConfigurationError (naming the variable) when it is not one."""
    field = SERVER_FIELDS[name]
    text = environ.get(name) or default or field.load_default
    try:
        return field.from_text(text)
    except ValueError as exc:
        raise ConfigurationError(name, str(exc), environment=True) from None


def check_server_names(environ: Mapping[str, str] = os.environ) -> None:
    """ConfigurationError for a `GUNICORN_*` variable that is not a setting, with the closest one."""
    known = [name for name in SERVER_FIELDS if name.startswith("GUNICORN_")] + list(_GUNICORN_OWN)
    for name in sorted(environ):
        if name.startswith("GUNICORN_") and name not in known:
            closest = closest_name(name, known)
            hint = f"did you mean {closest}?" if closest else "see the README's Settings"
            raise ConfigurationError(name, f"is not a setting of this service: {hint}", environment=True)
