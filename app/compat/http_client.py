"""http.client past its documented interface: interim (1xx) answers before the final one.

RFC 9110 §15.2: a client must be able to parse one or more 1xx answers before the final one,
even when it expects none. `HTTPResponse.begin` (undocumented) skips only 100 Continue, so a
receiver, or a proxy or CDN before it, that sends 103 Early Hints or 102 Processing before its
204 had each delivery taken as a failed attempt with that status, and was sent every event
ten times. `FinalAnswerConnection` reads such answers through `FinalResponse`, whose `begin`
parses again while the answer it parsed is interim (101 Switching Protocols is final: no
upgrade was asked for), at most `INTERIM_MAX` of them. It is http.client's `response_class`,
a class attribute its docs do not name. When `begin` or that attribute is not as expected, the
plain HTTPResponse stands: a 1xx stays a failed attempt, retried on the schedule.

`begin` also takes the close for the end of the head (`parse_headers` stops at the end of the
file as at the blank line): a receiver that closed after its status line had a 200 of no body,
the event taken as delivered. `FinalResponse` reads the head through `_LastLine`, which sees the
line it ended on (`fp`, the answer's file, is an attribute the docs do not name either), and a
head that did not end on its blank line raises RemoteDisconnected: cut short, as a body short of
its Content-Length is. Where that does not fit, a cut head stays an answer.
"""

from __future__ import annotations

import http.client
import io
import logging
from typing import Any

from app.compat import binds, warn

log = logging.getLogger(__name__)

#: The interim answers skipped before the final one: a receiver sending them without end is
#: answered by its own last one (a failed attempt), not read for the whole timeout.
INTERIM_MAX = 8


class _LastLine:
    """The answer's file as `begin` reads it (a line at a time), keeping the last line read."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.last = b""

    def readline(self, limit: int = -1) -> bytes:
        self.last = self.file.readline(limit)
        return self.last

    def close(self) -> None:
        # `begin` closes its file on a status line that is not HTTP's, then raises BadStatusLine.
        self.file.close()


class FinalResponse(http.client.HTTPResponse):
    """An answer read past its interim (1xx but 101) answers, to the final one, each head whole."""

    def begin(self) -> None:
        self._whole_head()
        for _ in range(INTERIM_MAX):
            if not (100 <= self.status < 200 and self.status != 101):
                return
            # begin() returns at once for an answer it has read: forget this one's headers, and
            # it reads the next answer's status line and headers, setting every field anew.
            self.headers = self.msg = None  # type: ignore[assignment]
            self._whole_head()

    def _whole_head(self) -> None:
        """HTTPResponse.begin, refusing a head that ended where the connection closed."""
        lines = _LastLine(self.fp)
        self.fp = lines  # type: ignore[assignment]
        try:
            super().begin()
        finally:
            if self.fp is lines:  # None when `begin` closed it (a status line not HTTP's)
                self.fp = lines.file
        if lines.last not in (b"\r\n", b"\n"):
            raise http.client.RemoteDisconnected("the answer's head ended before its blank line")


class _Answered:
    """Enough of a socket for HTTPResponse, which only reads the file `makefile` gives."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def makefile(self, mode: str) -> io.BufferedIOBase:
        return io.BytesIO(self.data)


def http_client_fits() -> bool:
    """Whether http.client reads answers as this module expects: `response_class` is where the
    connection takes its answers' class from, `FinalResponse` reads a 103 then a 204 as the
    204, refuses a head cut after its status line, and a status line that is not HTTP's."""
    if getattr(http.client.HTTPConnection, "response_class", None) is not http.client.HTTPResponse:
        return False
    if not binds(getattr(http.client.HTTPResponse, "begin", None)):
        return False
    answer = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"
    try:
        response = FinalResponse(_Answered(answer), method="POST")  # type: ignore[arg-type]
        response.begin()
    except Exception:  # whatever a changed http.client raises: it does not fit
        return False
    if (response.status, response.length, response.will_close) != (204, 0, False):
        return False
    # A head cut after its status line is cut short; a status line not HTTP's stays BadStatusLine
    # (`begin` closes the file it reads on the way).
    for head, raised in (
        (b"HTTP/1.1 200 OK\r\n", http.client.RemoteDisconnected),
        (b"ICY 200\r\n\r\n", http.client.BadStatusLine),
    ):
        try:
            FinalResponse(_Answered(head), method="POST").begin()  # type: ignore[arg-type]
        except raised:
            continue
        except Exception:
            return False
        return False
    return True


SKIPS_INTERIM = http_client_fits()
if not SKIPS_INTERIM:
    warn(
        log,
        "http.client's answers are not read as expected: a webhook receiver's 1xx answer is a failed attempt",
    )


class FinalAnswerConnection(http.client.HTTPConnection):
    """An HTTPConnection whose answers are the final ones (FinalResponse), where http.client is as
    expected."""

    if SKIPS_INTERIM:
        response_class = FinalResponse
