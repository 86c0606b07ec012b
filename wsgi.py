"""WSGI entry point: `flask --app wsgi run` for local development, or `gunicorn wsgi:app`.

A bad setting stops the start with one line that names it, not a traceback; so does a deprecation
of the interface document that breaks docs/versions.md's rules (a sunset too early, no date).
"""

from app import ConfigurationError, create_app
from app.plants.deprecation import DocumentError

try:
    app = create_app()
except ConfigurationError as exc:
    raise SystemExit(f"Plant Store: configuration error: {exc}") from None
except DocumentError as exc:
    raise SystemExit(f"Plant Store: the interface document is refused: {exc}") from None
