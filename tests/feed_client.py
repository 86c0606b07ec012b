"""A client of the filtered change feed, as the tests' followers use it: a keep-alive connection,
a server-sent-event block reader, and the rule a filtered follower applies to its copy."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlencode

from tests.servers import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {**AUTH, "Content-Type": "application/json"}


def send(
    conn: http.client.HTTPConnection, method: str, path: str, body: Any = None, headers: dict | None = None
) -> tuple[http.client.HTTPResponse, bytes]:
    """One request on `conn`, a body as JSON, with the token unless `headers`: the answer, read."""
    data = None if body is None else json.dumps(body)
    conn.request(method, path, body=data, headers=headers or (JSON if data else AUTH))
    response = conn.getresponse()
    return response, response.read()


class Client:
    """Requests on one keep-alive connection, opened again when the server closes it. A request
    whose connection broke is sent again once: the tests' writes are such that a repeat is harmless
    (a rename to a new name, a retag, a delete), or create a plant the follower sees anyway."""

    def __init__(self, port: int, timeout: float = 30) -> None:
        self.port, self.timeout = port, timeout
        self.conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: Any = None, headers: dict | None = None) -> tuple[int, Any]:
        """The status and the JSON body (None when empty)."""
        for attempt in range(2):
            conn = self.conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            self.conn = None
            try:
                response, raw = send(conn, method, path, body, headers)
            except (OSError, http.client.HTTPException):
                conn.close()
                if attempt:
                    raise
                continue
            if response.will_close:
                conn.close()
            else:
                self.conn = conn
            return response.status, json.loads(raw) if raw else None
        raise AssertionError("unreachable")

    def text(self, path: str) -> tuple[int, str]:
        """A GET whose answer is text (the metrics): the status and the text."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            conn.request("GET", path, headers=AUTH)
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def query(**params: Any) -> str:
    """A query string; a list value repeats its parameter (`tags=a&tags=b`), as the service reads it."""
    return urlencode({name: value for name, value in params.items() if value is not None}, doseq=True)


def listed(client: Client, tags: Iterable[str]) -> dict[int, dict]:
    """`GET /plants?tags=…` walked from its first page to its last: the plants by id."""
    plants: dict[int, dict] = {}
    after = None
    while True:
        status, page = client.call("GET", f"/plants?{query(tags=sorted(tags), limit=100, after=after)}")
        assert status == 200, page
        plants.update({plant["id"]: plant for plant in page["plants"]})
        if "next" not in page:
            return plants
        after = page["next"]


def apply(copy: dict[int, dict], event: dict, tags: frozenset[str]) -> None:
    """The documented rule of a follower filtered by `tags`: a deleted plant, or one whose tag is
    no longer one of them, is dropped; any other is put in the copy as the event shows it."""
    plant = event["plant"]
    if event["type"] == "plant.deleted" or plant.get("tag") not in tags:
        copy.pop(plant["id"], None)
    else:
        copy[plant["id"]] = plant


def assert_selected(event: dict, tags: frozenset[str]) -> None:
    """An event a `tags` filter may send: a created, existing or deleted plant shows a tag of the
    filter (a deleted one as it was); an update may show any, having had one of them before."""
    if event["type"] != "plant.updated":
        assert event["plant"].get("tag") in tags, event


class Stream:
    """`GET /events` as server-sent events: its status, then its blocks (the fields of each block a
    blank line ends, comments left out) as they arrive."""

    def __init__(self, port: int, path: str, last_event_id: str | None = None, timeout: float = 10) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        headers = {**AUTH, "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", path, headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status

    def blocks(self) -> Iterator[dict[str, str]]:
        fields: dict[str, str] = {}
        for raw in self.response:
            line = raw.decode().rstrip("\r\n")
            if not line:
                if fields:
                    yield fields
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")

    def close(self) -> None:
        self.conn.close()
