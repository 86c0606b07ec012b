"""Plant Store service: a Flask app for the plant store interface.

`create_app()` builds the standalone service; `app.plants.bp` is the blueprint to embed in
another Flask app. CONTRIBUTING.md maps the package.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from inspect import iscoroutinefunction
from typing import Any

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

from app import health, plants
from app.extension import init_state
from app.http.client_address import ForwardedAddress
from app.http.error_handler import register_json_errors
from app.http.json_provider import OrjsonProvider
from app.http.paths import ExactPaths
from app.http.request_target import RequestTarget
from app.settings import DEFAULTS, ConfigurationError, from_environ
from app.telemetry.request_ids import RequestIds

__all__ = ["ConfigurationError", "create_app"]


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the standalone service. Settings come from the environment; `config` overrides them.

    Raises ConfigurationError, naming the environment variable, when a setting is missing or invalid.
    """
    try:
        return _create_app(config)
    except ConfigurationError as exc:
        raise exc.from_environment() from None


class _Service(Flask):
    url_map_class = ExactPaths

    def ensure_sync(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """Flask's, answered from a cache for plain functions: Flask asks it of the view and of
        every hook on every request, and whether a function is a coroutine function never changes."""
        if _plain(func):
            return func
        return super().ensure_sync(func)


#: Bounded: the keys are the app's views and hooks (a bound method is equal to its next binding).
@functools.lru_cache(maxsize=1024)
def _plain(func: Callable[..., Any]) -> bool:
    return not iscoroutinefunction(func)


def _create_app(config: Mapping[str, Any] | None) -> Flask:
    app = _Service(__name__)
    app.json = OrjsonProvider(app)
    app.config.from_mapping(DEFAULTS)
    app.config.from_mapping(from_environ())
    if config:
        app.config.from_mapping(config)
    if app.config["PROPAGATE_EXCEPTIONS"] is None and not app.testing:
        # Flask lets an unexpected error out of the app in debug mode, where `flask run --debug`'s
        # Werkzeug debugger shows the client its traceback and frames' locals (the tokens among
        # them): logged and the JSON 500 instead. Set explicitly (or TESTING), it still propagates.
        app.config["PROPAGATE_EXCEPTIONS"] = False
    settings = init_state(app).settings

    register_json_errors(app)
    app.register_blueprint(plants.bp)
    app.register_blueprint(health.bp)

    proxies = settings.trusted_proxies
    if proxies:
        # ProxyFix takes any forwarded value; ForwardedAddress keeps it only when it is an address.
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            ForwardedAddress(app.wsgi_app, proxies),
            x_for=proxies,
            x_proto=proxies,
            x_host=proxies,
            x_port=proxies,
            x_prefix=proxies,
        )
    app.wsgi_app = RequestTarget(app.wsgi_app, app)  # type: ignore[method-assign]
    app.wsgi_app = RequestIds(app.wsgi_app, trusted_proxies=proxies)  # type: ignore[method-assign]
    return app
