"""gunicorn reads this file by default when started from the project's directory.

The settings themselves ship inside the package, so that an installed service starts the same
way from anywhere: `gunicorn -c python:app.server.gunicorn_conf`.
"""

from app.server.gunicorn_conf import *  # noqa: F403
