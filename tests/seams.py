"""The clients of the seams' harness (tests/integration/test_seams.py): writers, watchers of the
three documented kinds, and the check every answer meets (JSON, never a 500), each from a
loopback address of its own, through nginx as a deployment's clients come."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.feed_client import AUTH, JSON, send

#: Forwarded values a client may send: nginx replaces or clears them all.
SPOOFS: tuple[dict[str, str], ...] = (
    {"X-Forwarded-For": "203.0.113.7, 198.51.100.9"},
    {"Forwarded": "for=203.0.113.8;proto=https;host=evil.example"},
    {"X-Forwarded-For": "\x7fgarbage, , ;;", "X-Real-IP": "203.0.113.9"},
    {"X-Forwarded-For": "[2001:db8::1]:80", "X-Forwarded-Host": "evil.example"},
)
#: The id of the plant written last: a watcher that saw its creation has the whole feed.
SENTINEL = 999_999


class Seen:
    """Every answer's problems, shared by all clients: a 500, a body that is not JSON, an error
    that is no `Error` record."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.lock = threading.Lock()

    def check(self, what: str, status: int, headers: Any, body: bytes) -> Any:
        """The JSON body (None for an empty 204 or a stream), recording what is wrong with it."""
        problem = ""
        kind = headers.get("Content-Type", "")
        if status >= 500 and status != 503:
            problem = "a 5xx other than 503"
        elif status == 204 or kind.startswith("text/event-stream"):
            return None
        elif kind != "application/json":
            problem = f"Content-Type {kind!r}"
        else:
            try:
                record = json.loads(body)
            except ValueError:
                problem = "a body that is not JSON"
            else:
                if status >= 400 and set(record) - {"details"} != {"error", "message"}:
                    problem = "an error that is no Error record"
                if not problem:
                    return record
        with self.lock:
            self.problems.append(f"{what}: {status} {problem} {body[:300]!r}")
        return None


def connection(port: int, source: str, timeout: float = 20) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))


def request(
    seen: Seen, port: int, source: str, method: str, path: str, body: Any = None, headers: dict | None = None
) -> tuple[int, Any, http.client.HTTPMessage | None]:
    """One request on a new connection: status (0 when the connection broke), JSON body, headers."""
    conn = connection(port, source)
    try:
        response, raw = send(conn, method, path, body, headers)
    except (OSError, http.client.HTTPException):
        return 0, None, None
    finally:
        conn.close()
    return (
        response.status,
        seen.check(f"{method} {path}", response.status, response.headers, raw),
        response.headers,
    )


class Writer:
    """Writes its own plants, each created, replaced, patched, and a third of them deleted; an
    operation is sent again until it is answered 2xx (a 503 or a broken connection may have been
    applied: such an operation is `ambiguous`, and its event may show twice)."""

    def __init__(self, seen: Seen, port: int, source: str, ids: range) -> None:
        self.seen, self.port, self.source, self.ids = seen, port, source, ids
        #: Per plant, the events its acknowledged operations make, in order.
        self.expected: dict[int, list[tuple[str, dict | None]]] = {}
        self.ambiguous: set[tuple[int, int]] = set()
        self.spoof = 0

    def operate(self, plant_id: int, step: int, method: str, path: str, body: Any) -> None:
        while True:
            headers = {**(JSON if body is not None else AUTH), **SPOOFS[self.spoof % len(SPOOFS)]}
            self.spoof += 1
            status, _, _ = request(self.seen, self.port, self.source, method, path, body, headers)
            if 200 <= status < 300 or (
                method == "DELETE" and status == 404 and (plant_id, step) in self.ambiguous
            ):
                return
            if status not in (0, 429, 503):
                with self.seen.lock:
                    self.seen.problems.append(f"{method} {path}: {status}")
                return
            self.ambiguous.add((plant_id, step))
            time.sleep(0.1)

    def run(self, stop: threading.Event) -> None:
        for plant_id in self.ids:
            if stop.is_set():
                return
            path = f"/plants/{plant_id}"
            created = {"id": plant_id, "name": "a", "tag": "t"}
            self.operate(plant_id, 0, "POST", "/plants", created)
            self.operate(plant_id, 1, "PUT", path, {"name": "b", "tag": "u"})
            self.operate(plant_id, 2, "PATCH", path, {"name": "c"})
            events: list[tuple[str, dict | None]] = [
                ("plant.created", created),
                ("plant.updated", {"id": plant_id, "name": "b", "tag": "u"}),
                ("plant.updated", {"id": plant_id, "name": "c", "tag": "u"}),
            ]
            if plant_id % 3 == 0:
                self.operate(plant_id, 3, "DELETE", path, None)
                events.append(("plant.deleted", None))
            self.expected[plant_id] = events


class Watcher:
    """A follower that keeps a copy of the store from the feed, as change-feed.md says: a stream
    resumed with `Last-Event-ID`, a long-poll from `next`, or a stream with a watch ticket (a
    new ticket when one is refused). It ends once it saw the creation of the plant `until`."""

    def __init__(
        self, seen: Seen, port: int, source: str, kind: str, cursor: str, until: int = SENTINEL
    ) -> None:
        self.seen, self.port, self.source, self.kind, self.cursor = seen, port, source, kind, cursor
        self.until = until
        self.events: list[dict] = []
        self.done = threading.Event()
        self.ticket = ""

    def take(self, event: dict) -> None:
        self.events.append(event)
        if event["type"] == "plant.created" and event["plant"]["id"] == self.until:
            self.done.set()

    def run(self, deadline: float) -> None:
        follow: Callable[[], None] = self.poll if self.kind == "poll" else self.stream
        while not self.done.is_set() and time.monotonic() < deadline:
            try:
                follow()
            except (OSError, http.client.HTTPException):
                time.sleep(0.2)

    def poll(self) -> None:
        status, page, _ = request(
            self.seen, self.port, self.source, "GET", f"/events?after={self.cursor}&wait=5"
        )
        if status != 200 or page is None:
            time.sleep(0.3)
            return
        for event in page["events"]:
            self.take(event)
        self.cursor = page["next"]

    def stream(self) -> None:
        headers = {"Accept": "text/event-stream", "Last-Event-ID": self.cursor}
        path = f"/events?after={self.cursor}"
        if self.kind == "ticket":
            if not self.ticket:
                status, minted, _ = request(self.seen, self.port, self.source, "POST", "/events/tickets")
                if status != 200 or minted is None:
                    time.sleep(0.3)
                    return
                self.ticket = minted["ticket"]
            path += f"&ticket={self.ticket}"
        else:
            headers.update(AUTH)
        conn = connection(self.port, self.source, timeout=20)
        try:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            if response.status != 200:
                self.seen.check(f"stream {self.kind}", response.status, response.headers, response.read())
                self.ticket = "" if response.status == 401 else self.ticket
                time.sleep(0.3)
                return
            self.read_stream(response)
        finally:
            conn.close()

    def read_stream(self, response: http.client.HTTPResponse) -> None:
        fields: dict[str, str] = {}
        for raw in response:
            line = raw.decode().rstrip("\r\n")
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if "data" in fields:
                if fields.get("event") == "gone":
                    with self.seen.lock:
                        self.seen.problems.append(f"gone at {self.cursor}")
                    return
                self.take(json.loads(fields["data"]))
                self.cursor = fields["id"]
                if self.done.is_set():
                    return
            fields = {}
