"""An answer on its way out (`Outgoing`, one per connection): what the socket has not taken yet.

Sends never wait: what the client does not take at once is kept (`out`, and the rest of a large
answer, `body`: body.py) until its socket is writable again. An answer too large to hold whole
is sent as the client takes it: the rest of a file by `os.sendfile`, the rest of an iterable a
piece at a time, at most `TURN_BYTES` a turn. Each step says how it went (`DONE`, `WAITING` for
the socket, or `GONE`: the client has gone), and the connection (connection.py) acts on it.
"""

from __future__ import annotations

import socket
from typing import Any

from app.server.worker.body import FileBody, close_body

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
        self.body: Any = None  # the rest of an answer, sent as the client takes it (body.py)
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
