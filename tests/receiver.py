"""A real webhook receiver on 127.0.0.1 (http.server), for the delivery tests: it records every
request and the connection it came on, answers each as its `answer` function says, and verifies
with `standardwebhooks`."""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

from standardwebhooks import Webhook

from tests.threaded_http import serve_in_thread


class Delivery(NamedTuple):
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    #: The sender's end of the connection it came on (address, port): the same for two requests
    #: on one kept-alive connection.
    peer: tuple[str, int] = ("", 0)
    #: The receiver's address it was sent to.
    local: str = ""

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
    """`hosts`: the loopback addresses it listens on, all on one port (a host name that moves
    between them moves between two listeners of one receiver). `idle_timeout`: how long it keeps
    a connection with no request before it closes it (None: as long as the sender does). An
    answer with `Connection: close` closes its connection. `port`: the port to listen on (0: any
    free one), as another listener of the same host name has it on another address."""

    def __init__(
        self,
        answer: Callable[[Delivery, int], Answer] | None = None,
        hosts: tuple[str, ...] = ("127.0.0.1",),
        idle_timeout: float | None = None,
        port: int = 0,
    ) -> None:
        self.deliveries: list[Delivery] = []
        self.answer = answer or (lambda delivery, number: (204, {}, 0.0))
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = idle_timeout

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                if len(body) < length:  # the sender died mid-request: no delivery, as in any server
                    self.close_connection = True
                    return
                delivery = Delivery(
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                    time.monotonic(),
                    self.client_address[:2],
                    self.connection.getsockname()[0],
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

        self.servers: list[ThreadingHTTPServer] = []
        for host in hosts:
            server = ThreadingHTTPServer(
                (host, self.servers[0].server_address[1] if self.servers else port), Handler
            )
            server.daemon_threads = True
            self.servers.append(server)
            serve_in_thread(server)
        self.server = self.servers[0]
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"

    def connections(self) -> list[tuple[str, int]]:
        """The connection each delivery came on, in order of arrival."""
        with self._lock:
            return [delivery.peer for delivery in self.deliveries]

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
        for server in self.servers:
            server.shutdown()
            server.server_close()


class _SocketReceiver:
    """A listener on 127.0.0.1 that hands each connection it accepts to `_handle`, and counts them."""

    def __init__(self) -> None:
        self.connections = 0
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
            self.connections += 1
            self._handle(connection)

    def _handle(self, connection: socket.socket) -> None:
        raise NotImplementedError

    @staticmethod
    def _read_request(connection: socket.socket) -> bool:
        """Read one request; False when the connection ended first."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = connection.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *([0-9]+)", head)[1])  # type: ignore[index]
        while len(body) < length:
            chunk = connection.recv(65536)
            if not chunk:
                return False
            body += chunk
        return True

    def stop(self) -> None:
        self._listener.close()


class RawReceiver(_SocketReceiver):
    """A receiver on 127.0.0.1 that answers every request with the bytes `answer` gives, as they
    are (a status line and headers no HTTP server would write), then closes the connection."""

    def __init__(self, answer: Callable[[], bytes]) -> None:
        self.answer = answer
        super().__init__()

    def _handle(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(5)
            try:
                self._read_request(connection)
                self.requests += 1
                connection.sendall(self.answer())
                connection.shutdown(socket.SHUT_WR)
            except OSError:
                return


class ClosingReceiver(_SocketReceiver):
    """A receiver on 127.0.0.1 that answers the first request on each connection 204, keeping it
    alive as far as HTTP says, then closes it: after `after` seconds with a RST (`reset`), or, by
    default, once it has read a second request whole, without answering it. It counts the
    connections it accepted and the requests it read."""

    def __init__(self, *, after: float = 0.05, reset: bool = False) -> None:
        self.after, self.reset = after, reset
        super().__init__()

    def _handle(self, connection: socket.socket) -> None:
        threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(5)
            try:
                if not self._read_request(connection):
                    return
                self.requests += 1
                connection.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                if self.reset:
                    time.sleep(self.after)
                    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                elif self._read_request(connection):
                    self.requests += 1
            except OSError:
                return


class StalledReceiver:
    """A listener on 127.0.0.1 whose accept queue is full until `release`: a sender's connection
    hangs in its handshake (the kernel drops its SYNs, and the sender's retries come a second and
    more apart). Released, it accepts every connection and answers each request 204, recording
    the `webhook-id` of each request it read, not counting the connections that filled the queue."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=0)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self._fillers = []
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", self.port))
            self._fillers.append(filler)
        self._filler_ports = {filler.getsockname()[1] for filler in self._fillers}
        self._stop = threading.Event()

    def senders_stalled(self) -> bool:
        """Whether a socket of this host but the fillers is in its handshake to it (SYN sent)."""
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
        return any(
            fields[2] == f"0100007F:{self.port:04X}"
            and fields[3] == "02"
            and int(fields[1].split(":")[1], 16) not in self._filler_ports
            for fields in map(str.split, lines)
        )

    def release(self) -> None:
        for filler in self._fillers:
            filler.close()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                connection, peer = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if peer[1] in self._filler_ports:
                connection.close()
                continue
            self.connections += 1
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                found = re.search(rb"(?im)^webhook-id: *(\S+)", data)
                self.ids.append(found[1].decode() if found else "")
                connection.sendall(
                    b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
            except OSError:
                return

    def stop(self) -> None:
        self._stop.set()
        for filler in self._fillers:
            filler.close()
        self._listener.close()
