"""`SCRIPT_NAME` under a worker other than the packaged one (gunicorn's stock `gthread`, say).

gunicorn's own environ refuses a request whose path does not start with `SCRIPT_NAME` (from the
environment) with a 500 of its own, an HTML page: the probes' `/healthz`, which reach the
service without the prefix, were refused so. The packaged worker serves such a path as it is,
under the prefix's `SCRIPT_NAME`, and a path under the prefix without it. So here: the worker
takes the prefix out of its own environment (gunicorn reads it there for each request) and
applies it in front of the app, the packaged worker's way, so that both workers answer alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ScriptName:
    """Sets `SCRIPT_NAME` to `prefix` and takes it off the front of `PATH_INFO` where it is there
    (compared, as the packaged worker does, on the percent-decoded path): as a whole segment, so
    that `/storefront` is no path under `/store`, and `/storeplants` is not `/plants`."""

    def __init__(self, app: WsgiApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix
        self.prefix_slash = prefix + "/"

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path.startswith(self.prefix_slash) or path == self.prefix:
            environ["PATH_INFO"] = path[len(self.prefix) :]
        environ["SCRIPT_NAME"] = self.prefix
        return self.app(environ, start_response)


def take_over(worker: Any) -> None:
    """For a worker that is not the packaged one, in the worker's process (after the fork: the
    master keeps the variable for the workers it starts later): the prefix is applied in front of
    the app the worker serves, a Flask app's `wsgi_app` (the worker's hooks still find the app)."""
    # A trailing slash is the same prefix, as the packaged worker reads it (`/store/` is `/store`).
    prefix = os.environ.pop("SCRIPT_NAME", "").rstrip("/")
    if not prefix:
        return
    app = worker.wsgi
    if hasattr(app, "wsgi_app"):
        app.wsgi_app = ScriptName(app.wsgi_app, prefix)
    else:
        worker.wsgi = ScriptName(app, prefix)
