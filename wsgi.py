"""WSGI entry point: `flask --app wsgi run` for local development, or `gunicorn wsgi:app`.

A bad setting stops the start with one line that names it, not a traceback.
"""

from app import ConfigurationError, create_app

try:
    app = create_app()
except ConfigurationError as exc:
    raise SystemExit(f"Plant Store: configuration error: {exc}") from None
