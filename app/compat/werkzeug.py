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
"""

from __future__ import annotations

import io
import logging
from typing import IO

from werkzeug.wrappers import Request

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
    log.warning("Werkzeug's request body cache or stream has changed: each body is read through get_data")
