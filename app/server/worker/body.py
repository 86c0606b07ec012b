"""The rest of an answer too large to hold: sent as the client takes it, never held whole.

An answer whose body the app gives in one piece, or in pieces that add up to `HOLD_BYTES` at
most, is sent in one write (response.py). Past that, the worker sends what it has, and keeps the
app's iterable (`IterBody`) and asks it for the next piece only once the client has taken the
last: a slow reader holds one piece of the answer in the worker, not all of it. A file the app
hands back through `wsgi.file_wrapper` (Flask's `send_file` does, for the API page's assets) is
sent from the file with `os.sendfile` (`FileBody`), as gunicorn does, and holds no byte of it.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from typing import Any

from gunicorn.http.wsgi import FileWrapper

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
