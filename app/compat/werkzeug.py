"""Werkzeug past its documented interface: a request body that a host app read before the blueprint.

The plants blueprint reads a sized body in one read of `wsgi.input` (app/http/body.py), past
Werkzeug's stream wrapper. A host app's own hook may have read the body first, with the public
`request.get_data()` or `get_json()` (an audit log of every request, say): Werkzeug keeps what it
read in `Request._cached_data`, and `wsgi.input` is then at its end, so that a complete write was
read as one cut short. `read_earlier` hands back what such a read kept; `keep` keeps the
blueprint's own read there, so that the host's later readers (an `after_request`) see the body
too, as they would in any Flask app. `stream_made` says whether such a hook made `request.stream`
(and may have read from it) without making it, which the direct read must know before it reads:
a body the host read and did not keep is gone, and a read for it would wait on the connection.
When either is not as this module expects (checked at import), `FITS` is False and the blueprint
reads every body through `get_data`, the public path.

And under `flask run`, a target the development server cannot split or log (`http://[::1/`,
`http://b.example:8x/`) is served and logged as received (`serve_any_target`), not dropped.
"""

from __future__ import annotations

import io
import logging
from typing import IO, Any

from werkzeug.serving import WSGIRequestHandler
from werkzeug.wrappers import Request

from app.compat import binds, warn

log = logging.getLogger(__name__)

#: Where `Request.get_data` keeps the body it read, and looks for it before reading.
_KEPT = "_cached_data"
#: Where the `cached_property` `Request.stream` keeps the stream once made: the instance's dict.
_STREAM = "stream"


def read_earlier(req: Request) -> bytes | None:
    """The body as an earlier `get_data` kept it; None when nothing read it through Werkzeug."""
    kept = getattr(req, _KEPT, None)
    return kept if isinstance(kept, bytes) else None


def keep(req: Request, body: bytes) -> None:
    """Keep `body`, read past Werkzeug, where `get_data` answers a later reader from."""
    setattr(req, _KEPT, body)


def stream_made(req: Request) -> IO[bytes] | None:
    """`req.stream` when something made it already (a host's hook), else None; never makes it."""
    made: IO[bytes] | None = vars(req).get(_STREAM)
    return made


def body_cache_fits() -> bool:
    """Whether `get_data` keeps the body where `read_earlier` looks, and answers from what `keep` put."""

    def probe() -> Request:
        return Request({"REQUEST_METHOD": "POST", "CONTENT_LENGTH": "1", "wsgi.input": io.BytesIO(b"x")})

    try:
        read = probe()
        if read.get_data() != b"x" or read_earlier(read) != b"x":
            return False
        kept = probe()
        keep(kept, b"y")
        if kept.get_data() != b"y":
            return False
        fresh = probe()
        if stream_made(fresh) is not None:
            return False
        made = fresh.stream
        return stream_made(fresh) is made
    except Exception:
        return False


FITS = body_cache_fits()
if not FITS:
    warn(log, "Werkzeug's request body cache or stream has changed: each body is read through get_data")

#: A request line's control characters escaped, as Werkzeug's own request line escapes them.
_CONTROL = {c: rf"\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]} | {ord("\\"): r"\\"}


def request_line_fits() -> bool:
    """Whether the development server's request line can be wrapped (`log_request(code, size)`,
    `log`), and its environ made (`make_environ()`)."""
    return (
        binds(getattr(WSGIRequestHandler, "log_request", None), 400, "-")
        and callable(getattr(WSGIRequestHandler, "log", None))
        and binds(getattr(WSGIRequestHandler, "make_environ", None))
    )


SERVES_ANY_TARGET = request_line_fits()
if not SERVES_ANY_TARGET:
    warn(log, "Werkzeug's request handler has changed: `flask run` may drop an odd target's answer")
_wrapped: list[bool] = []


def serve_any_target() -> None:
    """Under `flask run`, once: Werkzeug's development server reads a target with `urlsplit`, and
    logs its request line with the target made an IRI (`uri_to_iri`); each raises ValueError on an
    authority whose IP literal is unclosed (`http://[::1/`), the second on one whose port is no
    number (`http://b.example:8x/`). The request was dropped (before the app, or as its answer's
    status line was logged), the connection closed. Such a request reaches the app with its target
    as received (its JSON 400: app/http/request_target.py), and its line is logged as received."""
    if not SERVES_ANY_TARGET or _wrapped:
        return
    _wrapped.append(True)
    logged, made = WSGIRequestHandler.log_request, WSGIRequestHandler.make_environ

    def log_request(self: WSGIRequestHandler, code: int | str = "-", size: int | str = "-") -> None:
        try:
            logged(self, code, size)
        except ValueError:
            self.log("info", '"%s" %s %s', self.requestline.translate(_CONTROL), code, size)

    def make_environ(self: WSGIRequestHandler) -> dict[str, Any]:
        try:
            return made(self)
        except ValueError:
            target = self.path
            self.path = "/"
            try:
                environ = made(self)
            finally:
                self.path = target
        # As Werkzeug puts a target in the environ (its `_wsgi_encoding_dance`).
        received = target.encode().decode("latin-1")
        environ["REQUEST_URI"] = environ["RAW_URI"] = received
        environ["PATH_INFO"], _, environ["QUERY_STRING"] = received.partition("?")
        return environ

    WSGIRequestHandler.log_request = log_request  # type: ignore[method-assign]
    WSGIRequestHandler.make_environ = make_environ  # type: ignore[method-assign]
