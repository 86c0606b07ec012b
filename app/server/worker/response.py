"""A WSGI answer: written as one buffer, head and body in one send, when it is small.

The app's `start_response` and `write` fill an `Answer`; `encode()` makes the bytes the
connection sends (connection.py). An answer larger than `body.HOLD_BYTES`, or a file, is not
held whole: `head()` makes its head, and its body follows as the client takes it (body.py). The
worker owns the framing headers: `Content-Length` (worked out when the app gives none and the
whole body is here; else the body is chunked), `Date` and `Connection`; hop-by-hop fields from
the app are dropped (PEP 3333 forbids them; gunicorn's own list, `gunicorn.util.hop_headers`),
and a body is never sent for HEAD, 1xx, 204 or 304.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from gunicorn import util

#: Fields the worker owns, dropped from the app's: gunicorn's list (the hop-by-hop fields of
#: RFC 9110 section 7.6.1, and Date and Server, which the server sets), and RFC 9110's own name
#: for `Trailer` (gunicorn's list says "trailers").
HOP_BY_HOP = frozenset(util.hop_headers) | {"trailer"}


class Head(NamedTuple):
    """An answer's head, and how its body goes."""

    data: bytes
    keep_alive: bool
    sends_body: bool  # False for HEAD, 1xx, 204 and 304
    chunked: bool
    declared: int | None  # the app's Content-Length


class HttpDate:
    """The Date field's value, made once a second."""

    def __init__(self) -> None:
        self._second = 0
        self._value = ""

    def now(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._value, self._second = util.http_date(second), second
        return self._value


class Answer:
    """What the app answers. `status`, `headers` and `sent` are what gunicorn's access log reads."""

    __slots__ = ("chunks", "headers", "sent", "status")

    def __init__(self) -> None:
        self.status = ""
        self.headers: list[tuple[str, str]] = []
        self.chunks: list[bytes] = []
        self.sent: int | None = None

    @property
    def status_code(self) -> int:
        """As gunicorn's response has it, for `post_request` hooks."""
        return int(self.status[:3])

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        if self.status and exc_info is None:
            raise AssertionError("start_response was already called")
        # Nothing is sent before the app returns, so an error page may always replace an answer.
        self.status, self.headers = status, headers
        return self.chunks.append

    def encode(self, method: str, keep_alive: bool, date: str) -> tuple[bytes, bool]:
        """The answer's bytes, and whether the connection stays open after it."""
        body = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        head = self.head(method, keep_alive, date, len(body))
        self.sent = len(body) if head.sends_body else 0
        return (head.data + body if head.sends_body else head.data), head.keep_alive

    def head(self, method: str, keep_alive: bool, date: str, length: int | None, http11: bool = True) -> Head:
        """The status line and header fields for a body of `length` bytes; None: not known yet,
        so chunked unless the app declared its length (on HTTP/1.0, ended by the close)."""
        status = self.status
        code = int(status[:3])
        bodyless = code < 200 or code in (204, 304)
        lines = [f"HTTP/1.1 {status}\r\n"]
        declared = None
        for name, value in self.headers:
            lower = name.lower()
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                raise ValueError(f"the header field {name!r} has a line break")
            if lower in HOP_BY_HOP:
                if lower == "connection" and "close" in value.lower():
                    keep_alive = False
                continue
            if lower == "content-length":
                declared = int(value)
            lines.append(f"{name}: {value}\r\n")
        chunked = False
        if length is None:  # the rest of the body comes as the client takes it (body.py)
            if declared is None and not bodyless and method != "HEAD":
                chunked = http11
                keep_alive = keep_alive and http11  # HTTP/1.0: the answer ends where the connection does
                lines.append("Transfer-Encoding: chunked\r\n" if chunked else "")
        elif declared is None and not bodyless and method != "HEAD":
            # A HEAD's body is not here to count (RFC 9110 §8.6: no Content-Length but GET's).
            lines.append(f"Content-Length: {length}\r\n")
        elif declared is not None and declared != length and method != "HEAD" and not bodyless:
            raise ValueError(f"the app declared Content-Length {declared} for a body of {length} bytes")
        lines.append(f"Date: {date}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n")
        data = "".join(lines).encode("latin-1")
        return Head(data, keep_alive, not (method == "HEAD" or bodyless), chunked, declared)
