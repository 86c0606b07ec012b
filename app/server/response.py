"""The worker's response writer: the status line and headers go out with the first body bytes.

gunicorn's Response sends the head and the body in separate writes, so a small JSON answer takes
two TCP segments; held back, it takes one.
"""

from __future__ import annotations

from gunicorn.http import wsgi


class OneSendResponse(wsgi.Response):
    """gunicorn's Response, holding the head back until the first body bytes go out with it."""

    _head: bytes | None = None

    def send_headers(self) -> None:
        if self.headers_sent or self._head is not None:
            return
        lines = self.default_headers()
        lines.extend([f"{name}: {value}\r\n" for name, value in self.headers])
        self._head = f"{''.join(lines)}\r\n".encode("latin-1")

    def _flush_head(self) -> bytes:
        head, self._head = self._head or b"", None
        self.headers_sent = True
        return head

    def _emit_body(self, data: bytes) -> None:
        if self.headers_sent or self.chunked:
            if not self.headers_sent:
                self.sock.sendall(self._flush_head())
            super()._emit_body(data)
        else:
            self.sock.sendall(self._flush_head() + data)

    def can_sendfile(self) -> bool:
        return False  # sendfile would write around the held-back head

    def close(self) -> None:
        self.send_headers()
        if not self.headers_sent:
            self.sock.sendall(self._flush_head())
        super().close()
