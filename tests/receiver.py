"""A real webhook receiver on 127.0.0.1 (http.server), for the delivery tests: it records every
request, answers each as its `answer` function says, and verifies with `standardwebhooks`."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

from standardwebhooks import Webhook


class Delivery(NamedTuple):
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def event(self) -> dict[str, Any]:
        return json.loads(self.body)

    def verified(self, secret: str) -> dict[str, Any]:
        """The payload, once `standardwebhooks` verified its signature with `secret`."""
        return Webhook(secret).verify(self.body, self.headers)


#: An answer: status, extra headers, and seconds to wait before answering.
Answer = tuple[int, dict[str, str], float]


class Receiver:
    def __init__(self, answer: Callable[[Delivery, int], Answer] | None = None) -> None:
        self.deliveries: list[Delivery] = []
        self.answer = answer or (lambda delivery, number: (204, {}, 0.0))
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                delivery = Delivery(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                )
                with receiver._lock:
                    receiver.deliveries.append(delivery)
                    number = len(receiver.deliveries)
                status, headers, wait = receiver.answer(delivery, number)
                if wait:
                    time.sleep(wait)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Delivery]:
        """The first `count` deliveries, once they came; AssertionError after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.deliveries) >= count:
                    return list(self.deliveries)
            time.sleep(0.02)
        raise AssertionError(f"{len(self.deliveries)} deliveries of {count} came in {timeout} s")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RawReceiver:
    """A receiver on 127.0.0.1 that answers every request with the bytes `answer` gives, as they
    are (a status line and headers no HTTP server would write), then closes the connection."""

    def __init__(self, answer: Callable[[], bytes]) -> None:
        self.answer = answer
        self.requests = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                try:
                    self._read_request(connection)
                    self.requests += 1
                    connection.sendall(self.answer())
                    connection.shutdown(socket.SHUT_WR)
                except OSError:
                    continue

    @staticmethod
    def _read_request(connection: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = connection.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *([0-9]+)", head)[1])  # type: ignore[index]
        while len(body) < length:
            chunk = connection.recv(65536)
            if not chunk:
                return
            body += chunk

    def stop(self) -> None:
        self._listener.close()
