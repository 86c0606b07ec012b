"""`flask --app wsgi run`: the line at start that says what is in effect, as gunicorn's master
logs it (gunicorn_conf.on_starting), printed with Flask's own banner.

Said only where `flask run` loads wsgi.py: gunicorn's workers import the module too, and their
master has said it; a host that embeds the blueprint never imports it, and its settings are the
host's to tell (docs/embedding.md).
"""

from __future__ import annotations

import click
from flask import Flask
from werkzeug.serving import is_running_from_reloader

from app.extension import plants_state
from app.server.settings_check import summary
from app.store import StoreUrl


def announce(app: Flask) -> None:
    """Print what `app` runs with, under `flask run` only, once: as Flask's banner, not again in
    the reloader's child (at each restart of `--debug`), whose settings are the same."""
    context = click.get_current_context(silent=True)
    if context is None or context.command.name != "run" or is_running_from_reloader():
        return
    settings = plants_state(app).settings
    threads = "a thread per request" if context.params.get("with_threads", True) else "one request at a time"
    line = summary(settings, StoreUrl.parse(settings.store_url))
    click.echo(f" * Plant Store: {line}; Flask's development server, {threads}")
