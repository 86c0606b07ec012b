"""gunicorn past its documented interface: `Connection: close` among other options closes a
connection of gunicorn's stock workers (gthread).

RFC 9110 section 7.6.1 makes `Connection` a list of options; gunicorn's request reads only a field
that is `close` (or `keep-alive`) alone, so `Connection: close, X-Trace` kept the connection open,
where the packaged worker (llhttp) and `flask run` close it. gunicorn honours no `Connection` the
app answers with (it drops the hop-by-hop fields), and decides before its `post_request` hook: the
`pre_request` hook sets the request's `must_close`, which its `should_close` reads first. Where
that is not as this module expects (checked at import), such a connection stays open as before.
"""

from __future__ import annotations

import logging
from typing import Any

from gunicorn.http.message import Message

from app.compat import warn

log = logging.getLogger(__name__)


def closes_on_must_close() -> bool:
    """Whether gunicorn's request reads `must_close` when it decides to close."""
    code = getattr(getattr(Message, "should_close", None), "__code__", None)
    return code is not None and "must_close" in code.co_names


CLOSES = closes_on_must_close()
if not CLOSES:
    warn(log, "gunicorn's request has changed: `Connection: close, X` keeps a gthread connection open")


def pre_request(worker: Any, req: Any) -> None:
    """gunicorn's own hook's line; then, for a request of gunicorn's own parser (the packaged
    worker's reads the field itself), its close asked among other options."""
    worker.log.debug("%s %s", req.method, req.path)
    if CLOSES and isinstance(req, Message) and asks_close(req.headers):
        req.must_close = True


def asks_close(headers: list[tuple[str, str]]) -> bool:
    """Whether a `Connection` field of `headers` (gunicorn's upper-case names) lists `close`."""
    return any(
        name == "CONNECTION" and any(option.strip(" \t").lower() == "close" for option in value.split(","))
        for name, value in headers
    )
