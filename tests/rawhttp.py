"""Raw HTTP/1.x exchanges over a socket, for requests no HTTP client library would send."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import socket
from dataclasses import dataclass


@dataclass
class RawResponse:
    status: int
    version: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self):
        return json.loads(self.body)


def exchange(port: int, data: bytes, timeout: float = 15.0) -> RawResponse | None:
    """Send `data`, read one response; None when the server closed without answering."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        # The server may answer and close before reading all of an oversized request.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        response = http.client.HTTPResponse(sock)
        try:
            response.begin()
        except (http.client.RemoteDisconnected, ConnectionResetError):
            return None
        return RawResponse(response.status, response.version, response.headers, response.read())


class _OneBuffer:
    """What `http.client.HTTPResponse` reads a socket through: one buffer for every answer, that
    no answer closes (a buffer per answer would drop the bytes of the next that came with it)."""

    def __init__(self, sock: socket.socket) -> None:
        self._file = _Unclosed(socket.SocketIO(sock, "rb"))

    def makefile(self, mode: str) -> io.BufferedReader:
        return self._file


class _Unclosed(io.BufferedReader):
    def close(self) -> None:
        pass


def responses(sock: socket.socket, most: int) -> list[RawResponse]:
    """Up to `most` answers to requests sent together on `sock`, until it closes or times out."""
    source = _OneBuffer(sock)
    answers = []
    for _ in range(most):
        response = http.client.HTTPResponse(source)  # type: ignore[arg-type]
        try:
            response.begin()
        except (http.client.RemoteDisconnected, ConnectionResetError, TimeoutError):
            break
        answers.append(RawResponse(response.status, response.version, response.headers, response.read()))
    return answers


def request(
    method: str = "POST",
    path: str = "/plants",
    body: bytes = b"",
    headers: dict[str, str] | list[tuple[str, str]] | None = None,
    version: str = "HTTP/1.1",
) -> bytes:
    """Bytes of one request with Content-Length and Connection: close added."""
    items = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    lines = [f"{method} {path} {version}", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in items]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


def chunked(*parts: bytes, headers: list[tuple[str, str]] | None = None, terminate: bool = True) -> bytes:
    """A POST /plants whose body is sent with Transfer-Encoding: chunked, one chunk per part."""
    lines = ["POST /plants HTTP/1.1", "Host: 127.0.0.1", "Transfer-Encoding: chunked", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers or []]
    body = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts)
    return "\r\n".join([*lines, "", ""]).encode("latin-1") + body + (b"0\r\n\r\n" if terminate else b"")
