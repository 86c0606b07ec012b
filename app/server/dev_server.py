"""`flask --app wsgi run`: the line at start that says what is in effect, as gunicorn's master
logs it (gunicorn_conf.on_starting), printed with Flask's own banner; and the logs, as gunicorn's
configuration sets them (app/telemetry/logs.py), each line redacted as the access log is.

Done only where `flask run` loads wsgi.py: gunicorn's workers import the module too, and their
master has said the line and set the logs; a host that embeds the blueprint never imports it, and
its settings and logging are the host's (docs/embedding.md).
"""

from __future__ import annotations

import logging

import click
from flask import Flask
from werkzeug.serving import is_running_from_reloader

from app.compat import release_warnings
from app.compat.werkzeug import serve_any_target
from app.extension import plants_state
from app.server.settings_check import environ_log_format, summary
from app.store import StoreUrl
from app.telemetry.logs import TicketFilter, service_handler


def _run_context() -> click.Context | None:
    """`flask run`'s context, when it is what loads the app."""
    context = click.get_current_context(silent=True)
    return context if context is not None and context.command.name == "run" else None


def announce(app: Flask) -> None:
    """Print what `app` runs with, under `flask run` only, once: as Flask's banner, not again in
    the reloader's child (at each restart of `--debug`), whose settings are the same."""
    context = _run_context()
    if context is None or is_running_from_reloader():
        return
    settings = plants_state(app).settings
    threads = "a thread per request" if context.params.get("with_threads", True) else "one request at a time"
    line = summary(settings, StoreUrl.parse(settings.store_url))
    click.echo(f" * Plant Store: {line}; Flask's development server, {threads}")


def set_logs() -> None:
    """Under `flask run` only, in the process that serves (the reloader's child too), before the app
    is made (its first lines, the identity provider's keys loaded, come from its threads): the
    service's lines (its `app.*` loggers, and Flask's `app.logger`, named after the package too) on
    stdout in PLANTS_LOG_FORMAT from INFO, with the request's fields, as under gunicorn, whatever
    `--debug` says; Werkzeug's own lines (its banner, a line per request) stay its own, on stderr,
    each redacted as gunicorn's access line: a watch ticket in `/events?ticket=` is a credential."""
    if _run_context() is None:
        return
    logger = logging.getLogger("app")
    logger.addHandler(service_handler(environ_log_format()))
    logger.setLevel(logging.INFO)
    logger.propagate = False  # a root handler of the developer's would write each line twice
    logging.getLogger("werkzeug").addFilter(TicketFilter())
    serve_any_target()
    release_warnings()  # the checks' at import, held until now: in the service's format
