"""The requests `python -m bench process` counts, sent one at a time on kept-alive connections, as
a client that waits for each answer does: a create, a GET of a plant, a page of 100, a PATCH of a
plant's name, and a watch's wake-up (a long-poll waiting on one connection, answered by a create
sent on another). Each request leaves in one write (http.client sends a body apart from its head,
which the server then reads in one or two system calls, as the timing falls).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

from bench.harness import TOKEN

KINDS = ("create", "get", "page", "patch", "watch")
#: Plants made before any GET, page or PATCH is counted: ids 0 to PRELOAD - 1.
PRELOAD = 1000


class Connection:
    """One kept-alive connection: a request written at once, its answer read by Content-Length."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.file = self.sock.makefile("rb")

    def request(self, method: str, path: str, body: bytes | None = None) -> None:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.sock.sendall(head.encode() + b"\r\n" + (body or b""))

    def response(self) -> tuple[int, bytes]:
        status = int(self.file.readline().split()[1])
        length = 0
        while (line := self.file.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, self.file.read(length)

    def close(self) -> None:
        self.file.close()
        self.sock.close()


class Client:
    """Requests of each kind to a server on `port`, every answer checked."""

    def __init__(self, port: int, creates_only: bool = False) -> None:
        self.port = port
        self.conn = Connection(port)
        self.watcher = Connection(port)
        self.next_id = 10**6
        self.cursor = "now"
        self.creates_only = creates_only
        #: How many plants preload made: the GETs and PATCHes go round them.
        self.preloaded = PRELOAD
        #: How long a watch's long-poll is given to park before its create is sent.
        self.park_s = 0.002

    def call(self, method: str, path: str, body: object = None, expected: int = 200) -> dict:
        self.conn.request(method, path, None if body is None else json.dumps(body).encode())
        status, data = self.conn.response()
        if status != expected:
            raise RuntimeError(f"{method} {path}: {status} {data[:300]!r}")
        return json.loads(data) if data else {}

    def create(self) -> None:
        self.next_id += 1
        plant = {"id": self.next_id, "name": f"Snake plant {self.next_id}", "tag": "vine"}
        self.call("POST", "/plants", plant)

    def preload(self, count: int = PRELOAD) -> None:
        """Plants 0 to `count` - 1: what GETs, pages and PATCHes read and change."""
        self.preloaded = count
        for number in range(count):
            self.call("POST", "/plants", {"id": number, "name": f"Snake plant {number:05d}", "tag": "vine"})
        self.cursor = self.call("GET", "/events?after=now")["next"]

    def sender(self, kind: str) -> Callable[[int], None]:
        """A function that sends the `n`th request of `kind`."""
        if kind == "create":
            return lambda n: self.create()
        if kind == "get":
            return lambda n: self.call("GET", f"/plants/{n % self.preloaded}") and None
        if kind == "page":
            return lambda n: self.call("GET", "/plants?limit=100") and None
        if kind == "patch":
            return lambda n: (
                self.call("PATCH", f"/plants/{n % self.preloaded}", {"name": f"Renamed {n}"}) and None
            )
        return lambda n: self.watch()

    def watch(self) -> None:
        """A long-poll parked at the feed's end, woken by a create on the other connection."""
        self.watcher.request("GET", f"/events?after={self.cursor}&wait=30")
        time.sleep(self.park_s)
        self.create()
        status, data = self.watcher.response()
        page = json.loads(data)
        if status != 200 or not page["events"]:
            raise RuntimeError(f"a watch woke with {status} {page}")
        self.cursor = page["next"]

    def reconnect(self) -> None:
        """Both connections anew: one left idle past the server's keep-alive is closed (a warm-up
        follows, so that no count sees the connect)."""
        self.close()
        self.conn, self.watcher = Connection(self.port), Connection(self.port)

    def send(self, kind: str, count: int) -> None:
        send = self.sender(kind)
        for number in range(count):
            send(number)

    def close(self) -> None:
        self.conn.close()
        self.watcher.close()
