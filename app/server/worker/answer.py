"""A WSGI answer on its way out: its bytes (`Answer`), the rest of a large one (`IterBody`,
`FileBody`), and what its client has not taken yet (`Outgoing`, one per connection).

**One write when small.** The app's `start_response` and `write` fill an `Answer`; `encode()`
makes the bytes the connection sends, head and body in one send. The worker owns the framing
headers: `Content-Length` (worked out when the app gives none and the whole body is here; else
the body is chunked), `Date` and `Connection`; hop-by-hop fields from the app are dropped (PEP
3333 forbids them; gunicorn's own list, `gunicorn.util.hop_headers`), and a body is never sent
for HEAD, 1xx, 204 or 304.

**A large answer is never held whole.** Past `HOLD_BYTES`, `head()` makes the head, and the
worker keeps the app's iterable (`IterBody`) and asks it for the next piece only once the client
has taken the last. A file the app hands back through `wsgi.file_wrapper` (Flask's `send_file`
does, for the API page's assets) is sent from the file with `os.sendfile` (`FileBody`), as
gunicorn does, and holds no byte of it.

**Sends never wait.** What the client does not take at once is kept (`Outgoing.out`, and the
rest of a large answer, `Outgoing.body`) until its socket is writable again, at most
`TURN_BYTES` a turn. Each step says how it went (`DONE`, `WAITING` for the socket, or `GONE`:
the client has gone), and the connection (connection.py) acts on it.
"""

from __future__ import annotations

import io
import os
import socket
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from gunicorn import util
from gunicorn.http.wsgi import FileWrapper

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
        if length is None:  # the rest of the body comes as the client takes it (`IterBody`, `FileBody`)
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


#: An answer's pieces are collected into one write up to this many bytes; past it, the rest is
#: asked for as the client takes it.
HOLD_BYTES = 64 * 1024


class IterBody:
    """The rest of an app's iterable, framed (chunked, or counted against its Content-Length)."""

    __slots__ = ("_close", "_iterator", "chunked", "left")

    def __init__(self, iterator: Iterator[bytes], close: Any, chunked: bool, length: int | None) -> None:
        self._iterator = iterator
        self._close = close
        self.chunked = chunked
        self.left = length  # the bytes the Content-Length still promises; None when chunked or unknown

    def pull(self) -> bytes | None:
        """The next bytes to send, framed; None at the end. ValueError when the app gives more
        than its Content-Length (the connection is then closed, the answer cut)."""
        for piece in self._iterator:
            if not piece:
                continue
            if self.left is not None:
                if len(piece) > self.left:
                    raise ValueError("the app gave more bytes than its Content-Length")
                self.left -= len(piece)
            return b"%x\r\n%s\r\n" % (len(piece), piece) if self.chunked else piece
        if self.left:
            raise ValueError("the app gave fewer bytes than its Content-Length")
        self.left = 0
        return b"0\r\n\r\n" if self.chunked else None

    def close(self) -> None:
        if self._close is not None:
            close, self._close = self._close, None
            close()


class FileBody:
    """A file's bytes, sent by the kernel from the file to the socket."""

    __slots__ = ("_wrapper", "fileno", "left", "offset")

    def __init__(self, wrapper: FileWrapper, fileno: int, offset: int, count: int) -> None:
        self._wrapper = wrapper
        self.fileno, self.offset, self.left = fileno, offset, count

    @classmethod
    def of(cls, result: Any) -> FileBody | None:
        """The file behind `wsgi.file_wrapper`'s answer, if it is a regular file with a descriptor."""
        if not isinstance(result, FileWrapper):
            return None
        try:
            fileno = result.filelike.fileno()
            offset = os.lseek(fileno, 0, os.SEEK_CUR)
            size = os.fstat(fileno).st_size
        except (AttributeError, OSError, io.UnsupportedOperation):
            return None
        return cls(result, fileno, offset, max(size - offset, 0))

    def send(self, sock_fd: int, most: int) -> int:
        """Send up to `most` bytes; BlockingIOError when the socket takes none now."""
        sent = os.sendfile(sock_fd, self.fileno, self.offset, min(most, self.left))
        if sent == 0:  # the file ended before its length: the answer cannot be completed
            raise ValueError("the file is shorter than its answer's Content-Length")
        self.offset += sent
        self.left -= sent
        return sent

    def close(self) -> None:
        close = getattr(self._wrapper, "close", None)
        if close is not None:
            close()


def close_body(body: Any, log: Any) -> None:
    """Close the rest of an answer (the app's iterable, or its file); an error is logged."""
    try:
        body.close()
    except Exception:
        log.exception("Error closing an answer's body")


#: The most of a large answer one turn sends before the connection goes to the back of the queue.
TURN_BYTES = 256 * 1024
DONE, WAITING, GONE = 0, 1, 2


class Outgoing:
    """The unsent part of a connection's answer, and the bytes its client has taken of it."""

    __slots__ = ("_sock", "body", "close_after", "fd", "out", "sent", "started")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.fd = sock.fileno()
        self.out: memoryview | None = None
        self.body: Any = None  # the rest of an answer, sent as the client takes it (`IterBody`, `FileBody`)
        self.close_after = False
        self.started = 0.0  # when the answer being sent began, and its bytes taken so far,
        self.sent = 0  # for the choice of whom to displace (loop.py)

    def send_now(self, view: memoryview) -> int | None:
        """What the socket takes of `view` without waiting; None when the client has gone."""
        try:
            sent = self._sock.send(view) if view else 0
        except BlockingIOError:
            return 0
        except OSError:
            return None
        self.sent += sent
        return sent

    def _put(self, view: memoryview) -> int:
        """Send what the socket takes of `view` now; the rest is kept in `out`."""
        sent = self.send_now(view)
        if sent is None:
            return GONE
        if sent < len(view):
            self.out = view[sent:]
            return WAITING
        self.out = None
        return DONE

    def send(self, data: bytes, close_after: bool) -> int:
        """Send what the socket takes now; the rest is kept in `out`."""
        went = self._put(memoryview(data))
        if went != GONE:
            self.close_after = close_after
        return went

    def pump(self, log: Any) -> int:
        """Send the rest of a large answer as the socket takes it, `TURN_BYTES` at most."""
        body = self.body
        turn = TURN_BYTES
        try:
            while turn > 0:
                if isinstance(body, FileBody):
                    if not body.left:
                        break
                    try:
                        taken = body.send(self.fd, turn)
                    except BlockingIOError:
                        return WAITING
                    self.sent += taken
                    turn -= taken
                    continue
                piece = body.pull()
                if piece is None:
                    break
                turn -= len(piece)
                went = self._put(memoryview(piece))
                if went != DONE:
                    return went
            else:  # its turn is up: the others' come first
                return WAITING
        except OSError:  # the client has gone
            return GONE
        except Exception:
            log.exception("Error sending an answer's body: the connection is closed")
            return GONE
        self.body = None
        close_body(body, log)
        return DONE

    def flush(self, log: Any) -> int:
        """Send what waited for the socket, then the rest of a large answer."""
        if self.out is not None:
            went = self._put(self.out)
            if went != DONE:
                return went
        return DONE if self.body is None else self.pump(log)
