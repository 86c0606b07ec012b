"""WSGI entry point: `flask --app wsgi run` for local development, or `gunicorn wsgi:app`.

At start, one line says what is in effect, and the logs are set as under gunicorn
(app/server/dev_server.py under `flask run`).
A bad setting stops the start with one line that names it, not a traceback; so does a deprecation
of the interface document that breaks docs/versions.md's rules (a sunset too early, no date).
"""

from app import ConfigurationError, create_app
from app.plants.deprecation import DocumentError
from app.server.dev_server import announce, set_logs

set_logs()  # under `flask run`, before the app's first lines; gunicorn's configuration sets them
try:
    app = create_app()
except ConfigurationError as exc:
    raise SystemExit(f"Plant Store: configuration error: {exc}") from None
except DocumentError as exc:
    raise SystemExit(f"Plant Store: the interface document is refused: {exc}") from None
announce(app)  # under `flask run`; gunicorn's master says it for its workers
