"""Plant Store service: a Flask app for the plant store interface.

`create_app()` builds the standalone service; `app.plants.bp` is the blueprint to embed in
another Flask app. CONTRIBUTING.md maps the package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask, Request
from flask.sessions import NullSession, SecureCookieSessionInterface
from werkzeug.middleware.proxy_fix import ProxyFix

from app import health, plants
from app.extension import init_state
from app.http.error_handler import register_json_errors
from app.http.json_provider import OrjsonProvider
from app.settings import DEFAULTS, ConfigurationError, from_environ
from app.telemetry.request_ids import RequestIds

__all__ = ["ConfigurationError", "create_app"]


class _SharedNullSession(SecureCookieSessionInterface):
    """Flask's cookie sessions, but without a secret key (the service's case) every request
    shares one null session instead of a new one: it refuses every write, so it holds nothing."""

    def __init__(self) -> None:
        self._null = NullSession()

    def open_session(self, app: Flask, request: Request) -> Any:
        return super().open_session(app, request) if app.secret_key else self._null


class _PlantsRequest(Request):
    """Flask's request, working out its blueprints once (Flask asks three times a request:
    before it, after it and at its teardown), once its URL has matched a rule."""

    @property
    def blueprints(self) -> list[str]:
        names: list[str] | None = self.__dict__.get("_plants_blueprints")
        if names is None:
            names = super().blueprints
            if self.url_rule is not None:
                self.__dict__["_plants_blueprints"] = names
        return names


class PlantsApp(Flask):
    """Flask, asking once per function whether it is a coroutine function, opening no session
    per request (see _SharedNullSession) and working out a request's blueprints once.

    Flask's `ensure_sync` asks `inspect.iscoroutinefunction` on every call of every hook and view,
    three times per request here; the answer never changes for a function.
    """

    request_class = _PlantsRequest

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sync: dict[Callable[..., Any], Callable[..., Any]] = {}
        self.session_interface = _SharedNullSession()

    def ensure_sync(self, func: Callable[..., Any]) -> Callable[..., Any]:
        sync = self._sync.get(func)
        if sync is None:
            sync = self._sync[func] = super().ensure_sync(func)
        return sync


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the standalone service. Settings come from the environment; `config` overrides them.

    Raises ConfigurationError, naming the environment variable, when a setting is missing or invalid.
    """
    try:
        return _create_app(config)
    except ConfigurationError as exc:
        raise exc.from_environment() from None


def _create_app(config: Mapping[str, Any] | None) -> Flask:
    app = PlantsApp(__name__)
    app.json = OrjsonProvider(app)
    app.config.from_mapping(DEFAULTS)
    app.config.from_mapping(from_environ())
    if config:
        app.config.from_mapping(config)
    settings = init_state(app).settings

    register_json_errors(app)
    app.register_blueprint(plants.bp)
    app.register_blueprint(health.bp)

    proxies = settings.trusted_proxies
    if proxies:
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=proxies, x_proto=proxies, x_host=proxies, x_port=proxies, x_prefix=proxies
        )
    app.wsgi_app = RequestIds(app.wsgi_app, trusted_proxies=proxies)  # type: ignore[method-assign]
    return app
