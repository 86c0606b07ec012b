"""The settings of the packaged gunicorn configuration (app/server/gunicorn_conf.py), declared
like the service's own: each environment variable, its type, default and least value."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from marshmallow import Schema

from app.settings.configuration_error import ConfigurationError, closest_name
from app.settings.fields import Setting, is_path_prefix


class ServerNumber(Setting):
    """A finite number read from the environment as `convert` reads it, from `minimum` to `maximum`."""

    def __init__(
        self,
        default: str | None,
        convert: Callable[[str], Any],
        kind: str,
        minimum: float,
        maximum: float = math.inf,
    ) -> None:
        super().__init__(default)
        self.convert, self.kind, self.minimum, self.maximum = convert, kind, minimum, maximum

    def from_text(self, text: str) -> Any:
        try:
            value = self.convert(text)
        except ValueError:
            value = None
        # not (value >= minimum): NaN too, which every comparison of a deadline would ignore.
        if value is None or not (value >= self.minimum) or math.isinf(value):
            raise ValueError(f"must be {self.kind} >= {self.minimum:g}, not {text!r}")
        if value > self.maximum:
            raise ValueError(f"must be {self.kind} <= {self.maximum:g}, not {text!r}")
        return value


class Bind(Setting):
    """Addresses to listen on, comma-separated, as gunicorn's `--bind` takes them (`HOST:PORT`,
    `[IPv6]:PORT`, `unix:PATH`, `fd://N`), checked here so that a wrong one is one line rather than
    gunicorn's five attempts to bind it. A port alone is `127.0.0.1:PORT`: gunicorn would read it
    as a host (an IPv4 address written as one number) on its default port."""

    def from_text(self, text: str) -> list[str]:
        parts = [part.strip() for part in text.split(",")]
        if "" in parts:
            raise ValueError(f"must be addresses such as 127.0.0.1:8000, comma-separated, not {text!r}")
        return [_address(part) for part in parts]


def _address(text: str) -> str:
    if text.isdigit():
        return f"127.0.0.1:{_port(text, text)}"
    if text.startswith("unix:"):
        if not text.removeprefix("unix:").lstrip("/"):
            raise ValueError(f"names no socket path in {text!r}")
        return text
    if text.startswith("fd://"):
        if not text[5:].isdigit():
            raise ValueError(f"names no file descriptor in {text!r}")
        return text
    netloc = text.removeprefix("tcp://")
    if netloc.startswith("["):
        host, _, rest = netloc[1:].partition("]")
        port = rest.removeprefix(":") if rest.startswith(":") else None
        if rest and port is None:
            raise ValueError(f"must be [IPv6]:PORT, not {text!r}")
    else:
        host, colon, port_text = netloc.partition(":")
        port = port_text if colon else None
    if not host:
        raise ValueError(f"names no host in {text!r} (127.0.0.1:PORT listens on this machine only)")
    if port is not None:
        _port(port, text)
    return text


def _port(port: str, text: str) -> int:
    number = int(port) if port.isdigit() else -1
    if not 0 <= number <= 65535:
        raise ValueError(f"has no valid port (0-65535) in {text!r}")
    return number


class PathPrefix(Setting):
    """The path the service is served under, as WSGI's `SCRIPT_NAME` holds it (decoded), or none.
    The worker matches it with a request's decoded path, and Werkzeug writes it into every URL
    handed out as it is: `store` made them `http://hoststore/...`, `/%zz` or `/a b` no URL, `/a?b`
    one with a query, and `//evil.example` the document's `servers` another host's. A trailing
    slash is the same prefix (`/store/` is `/store`, `/` none), as the workers read it."""

    def from_text(self, text: str) -> str:
        if not is_path_prefix(text, encoded=False):
            raise ValueError(
                "must be a path such as /store: segments of A-Z a-z 0-9 and - . _ ~ ! $ & ' ( ) * + , ; = : @"
                f", none empty or . or .. (no %, space, ? or #), not {text!r}"
            )
        return text.rstrip("/")


class ServerSettingsSchema(Schema):
    #: gunicorn's own convention; the in-memory store allows only 1.
    WEB_CONCURRENCY = ServerNumber("1", int, "a whole number", 1)
    GUNICORN_BIND = Bind("127.0.0.1:8000")
    #: Unset: 1 with the in-memory store, 2 with a shared one (gunicorn_conf.py says why).
    #: The packaged worker; `gthread` (gunicorn's stock threaded worker) or any worker class name.
    GUNICORN_WORKER_CLASS = Setting("app.server.worker.PlantsWorker")
    #: Each thread is started at boot: past this, a worker takes minutes to boot or never does.
    GUNICORN_THREADS = ServerNumber(None, int, "a whole number", 1, 10_000)
    GUNICORN_READ_TIMEOUT = ServerNumber("10", float, "a number of seconds", 0.1)
    #: MiB a worker holds for its clients at most (app/server/worker/loop.py).
    GUNICORN_MEMORY_BUDGET = ServerNumber("64", int, "a whole number of MiB", 1)
    GUNICORN_KEEPALIVE = ServerNumber("75", int, "a whole number of seconds", 0)
    GUNICORN_GRACEFUL_TIMEOUT = ServerNumber("30", int, "a whole number of seconds", 0)
    FORWARDED_ALLOW_IPS = Setting("")
    #: The path prefix (docs/operations.md), which the worker reads itself: checked at start.
    SCRIPT_NAME = PathPrefix("")


#: The declared server settings, by name.
SERVER_FIELDS: dict[str, Setting] = ServerSettingsSchema().fields  # type: ignore[assignment]
#: gunicorn's own variable, read by gunicorn itself: known, so not "misspelled".
_GUNICORN_OWN = ("GUNICORN_CMD_ARGS", "GUNICORN_FD", "GUNICORN_PID")


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
