"""The worker's response writer: the whole answer is collected in memory, then sent at once.

A request thread never writes to a client's socket itself: gunicorn's Response writes into a
ResponseBuffer, and the poller sends what it holds (app/server/poller.py). So the status line
and headers go out with the first body bytes, and a small JSON answer is one TCP segment.
"""

from __future__ import annotations

from gunicorn.http import wsgi


class ResponseBuffer:
    """Stands in for the client's socket while the app answers: it keeps what is written."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self._chunks.append(bytes(data))

    def send(self, data: bytes) -> int:
        # gunicorn's wsgi.create sends "100 Continue" this way; the poller has already sent it,
        # before it read the body.
        return len(data)

    def gettimeout(self) -> float:
        return 0.0

    def setblocking(self, flag: bool) -> None:
        pass

    def getvalue(self) -> bytes:
        return b"".join(self._chunks)


class BufferedResponse(wsgi.Response):
    """gunicorn's Response, written into a ResponseBuffer (never by sendfile)."""

    def can_sendfile(self) -> bool:
        return False
