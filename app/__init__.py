"""Plant Store service: a Flask app for the plant store interface.

`create_app()` builds the standalone service; `app.plants.bp` is the blueprint
to embed in another Flask app.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

from . import plants, service
from .errors import register_json_errors
from .json_provider import OrjsonProvider
from .settings import DEFAULTS, ConfigurationError, from_environ, integer_setting

__all__ = ["ConfigurationError", "create_app"]


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the standalone service. Settings come from the environment; `config` overrides them.

    Raises ConfigurationError, naming the environment variable, when a setting is missing or invalid.
    """
    try:
        return _create_app(config)
    except ConfigurationError as exc:
        raise exc.from_environment() from None


def _create_app(config: Mapping[str, Any] | None) -> Flask:
    app = Flask(__name__)
    app.json = OrjsonProvider(app)
    app.config.from_mapping(DEFAULTS)
    app.config.from_mapping(from_environ())
    if config:
        app.config.from_mapping(config)
    integer_setting(app.config, "MAX_CONTENT_LENGTH", minimum=1)

    register_json_errors(app)
    app.register_blueprint(plants.bp)
    app.register_blueprint(service.bp)

    proxies = integer_setting(app.config, "PLANTS_TRUSTED_PROXIES")
    if proxies:
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=proxies, x_proto=proxies, x_host=proxies, x_port=proxies, x_prefix=proxies
        )
    return app
