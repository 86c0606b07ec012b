"""A WSGI answer collected in memory, then written as one buffer: head and body in one send.

The app's `start_response` and `write` fill an `Answer`; `encode()` makes the bytes the poller
sends. The worker owns the framing headers: `Content-Length` (worked out when the app gives
none, since the whole body is here), `Date` and `Connection`; hop-by-hop fields from the app are
dropped (PEP 3333 forbids them), and a body is never sent for HEAD, 1xx, 204 or 304.
"""

from __future__ import annotations

import time
from email.utils import formatdate
from typing import Any

_HOP_BY_HOP = frozenset(
    [
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ]
)


class HttpDate:
    """The Date field's value, made once a second."""

    def __init__(self) -> None:
        self._second = 0
        self._value = ""

    def now(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._value, self._second = formatdate(second, usegmt=True), second
        return self._value


class Answer:
    """What the app answers. `status`, `headers` and `sent` are what gunicorn's access log reads."""

    __slots__ = ("chunks", "headers", "sent", "status")

    def __init__(self) -> None:
        self.status = ""
        self.headers: list[tuple[str, str]] = []
        self.chunks: list[bytes] = []
        self.sent: int | None = None

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        if self.status and exc_info is None:
            raise AssertionError("start_response was already called")
        # Nothing is sent before the app returns, so an error page may always replace an answer.
        self.status, self.headers = status, headers
        return self.chunks.append

    def encode(self, method: str, keep_alive: bool, date: str) -> tuple[bytes, bool]:
        """The answer's bytes, and whether the connection stays open after it."""
        status = self.status
        code = int(status[:3])
        body = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        bodyless = code < 200 or code in (204, 304)
        lines = [f"HTTP/1.1 {status}\r\n"]
        declared = None
        for name, value in self.headers:
            lower = name.lower()
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                raise ValueError(f"the header field {name!r} has a line break")
            if lower in _HOP_BY_HOP:
                if lower == "connection" and "close" in value.lower():
                    keep_alive = False
                continue
            if lower == "content-length":
                declared = int(value)
            lines.append(f"{name}: {value}\r\n")
        if declared is None and not bodyless:
            lines.append(f"Content-Length: {len(body)}\r\n")
        elif declared is not None and declared != len(body) and method != "HEAD" and not bodyless:
            raise ValueError(f"the app declared Content-Length {declared} for a body of {len(body)} bytes")
        if method == "HEAD" or bodyless:
            body = b""
        lines.append(f"Date: {date}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n")
        self.sent = len(body)
        return "".join(lines).encode("latin-1") + body, keep_alive
