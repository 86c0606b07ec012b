"""Exactly once across reconnects: 200 streams of server-sent events, each closed at random and
resumed with `Last-Event-ID`, while 4 writers create plants. Every stream ends with the whole
feed: no gap, no repeat, in the feed's order (on a cluster, in order per plant, which is the
feed's promise there). On memory, on one Redis (two workers) and on a Redis Cluster."""

from __future__ import annotations

import http.client
import json
import random
import selectors
import socket
import threading
import time

import pytest

from tests.conftest import settings_for_store
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CLIENTS = 200
WRITERS = 4
WRITE_SECONDS = 4.0
#: Streams cut a second while writing: twice CLIENTS in WRITE_SECONDS, whatever the machine's speed.
CUTS_PER_SECOND = 100
#: The fewest writes the streams must carry, however long it takes (at most MOST_WRITE_SECONDS).
MIN_WRITES, MOST_WRITE_SECONDS = 100, 30


class Client:
    """One stream at a time, de-chunked and split into events as bytes arrive."""

    def __init__(self, port: int, after: str) -> None:
        self.port, self.last_id, self.after = port, None, after
        self.ids: list[int] = []
        self.sock: socket.socket | None = None
        self.reconnects = 0

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        resume = f"Last-Event-ID: {self.last_id}\r\n" if self.last_id else ""
        sock.sendall(
            f"GET /events?after={self.after} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Accept: text/event-stream\r\n{resume}\r\n".encode()
        )
        sock.setblocking(False)
        self.sock, self.raw, self.text, self.head_done = sock, b"", b"", False
        return sock

    def feed(self, data: bytes) -> None:
        self.raw += data
        if not self.head_done:
            head, found, rest = self.raw.partition(b"\r\n\r\n")
            if not found:
                return
            assert head.startswith(b"HTTP/1.1 200 "), head
            self.raw, self.head_done = rest, True
        while True:  # whole chunks only
            size_line, found, rest = self.raw.partition(b"\r\n")
            if not found:
                break
            size = int(size_line, 16)
            if len(rest) < size + 2:
                break
            self.text += rest[:size]
            self.raw = rest[size + 2 :]
        while b"\n\n" in self.text:  # whole events only: a cut one is read again after its id
            block, _, self.text = self.text.partition(b"\n\n")
            fields = dict(line.split(": ", 1) for line in block.decode().split("\n") if ": " in line)
            if "data" in fields:
                assert fields["event"] != "gone", fields
                self.ids.append(json.loads(fields["data"])["plant"]["id"])
                self.last_id = fields["id"]


def pump(selector: selectors.BaseSelector) -> None:
    """One turn over the streams: each feeds what came; one whose stream closed reconnects with
    its last id."""
    for key, _ in selector.select(0.05):
        client = key.data
        try:
            data = key.fileobj.recv(65536)  # type: ignore[union-attr]
        except BlockingIOError:
            continue
        except ConnectionResetError:
            data = b""
        if data:
            client.feed(data)
        if not data:
            reconnect(selector, key)


def reconnect(selector: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
    """The client of `key` closes its stream and opens another with its last id."""
    selector.unregister(key.fileobj)
    key.fileobj.close()  # type: ignore[union-attr]
    key.data.reconnects += 1
    selector.register(key.data.connect(), selectors.EVENT_READ, key.data)


def read_feed(gunicorn: Gunicorn, cursor: str) -> list[int]:
    """The ids of every event after `cursor`, page by page."""
    ids: list[int] = []
    while True:
        conn = gunicorn.connection()
        conn.request("GET", f"/events?after={cursor}&limit=1000", headers=AUTH)
        page = json.loads(conn.getresponse().read())
        if not page["events"]:
            return ids
        ids += [event["plant"]["id"] for event in page["events"]]
        cursor = page["next"]


@pytest.fixture(params=["memory", "redis", "cluster"])
def server(request):
    # Room for each client's old stream and new one while the server notices the old one closed,
    # and no more: a stream whose place is not given back shows as a 429 within the run.
    env = {
        **settings_for_store(request, request.param),
        "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": str(3 * CLIENTS),
    }
    if request.param != "memory":
        env["WEB_CONCURRENCY"] = "2"
    server = Gunicorn(env=env)
    yield request.param, server
    server.stop()


def write(port: int, first: int, stop: threading.Event, written: list[int]) -> None:
    """Creates until `stop`; one whose connection broke is sent again (a replay answers 200 and
    records nothing), as a client would."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {**AUTH, "Content-Type": "application/json"}
    plant_id = first
    while not stop.is_set():
        try:
            conn.request("POST", "/plants", json.dumps({"id": plant_id, "name": "r"}), headers)
            response = conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            continue
        assert response.status == 200
        written.append(plant_id)
        plant_id += 1
        time.sleep(0.02)


def test_every_stream_gets_every_event_once_across_random_reconnects(server):
    store, gunicorn = server
    conn = gunicorn.connection()
    conn.request("GET", "/events?after=now", headers=AUTH)
    cursor = json.loads(conn.getresponse().read())["next"]
    clients = [Client(gunicorn.port, cursor) for _ in range(CLIENTS)]
    selector = selectors.DefaultSelector()
    for client in clients:
        selector.register(client.connect(), selectors.EVENT_READ, client)
    stop, written = threading.Event(), [[] for _ in range(WRITERS)]
    writers = [
        threading.Thread(target=write, args=(gunicorn.port, 720_000_000 + n * 1_000_000, stop, written[n]))
        for n in range(WRITERS)
    ]
    for thread in writers:
        thread.start()
    rng = random.Random(7)
    writing_from, cuts = time.monotonic(), 0
    writing_until = writing_from + WRITE_SECONDS
    total = None
    deadline = writing_from + MOST_WRITE_SECONDS + 20
    while time.monotonic() < deadline:
        now = time.monotonic()
        # Writing goes on past WRITE_SECONDS until MIN_WRITES (a loaded machine writes slowly).
        if (
            total is None
            and now >= writing_until
            and (sum(len(ids) for ids in written) > MIN_WRITES or now >= writing_from + MOST_WRITE_SECONDS)
        ):
            stop.set()
            for thread in writers:
                thread.join(10)
            total = sum(len(ids) for ids in written)
            deadline = time.monotonic() + 20
        if total is None:  # cut streams at random while writing, CUTS_PER_SECOND of them, however fast
            due = min(int((time.monotonic() - writing_from) * CUTS_PER_SECOND) - cuts, CLIENTS)
            for key in rng.sample(sorted(selector.get_map().values(), key=lambda key: key.fd), due):
                reconnect(selector, key)
            cuts += due
        pump(selector)
        if total is not None and all(len(client.ids) >= total for client in clients):
            break
    for key in list(selector.get_map().values()):
        key.fileobj.close()
    assert total is not None
    assert total > MIN_WRITES
    feed = read_feed(gunicorn, cursor)
    assert sorted(feed) == sorted(id_ for ids in written for id_ in ids)
    assert sum(client.reconnects for client in clients) > CLIENTS  # they were cut, many times
    for client in clients:
        if store == "cluster":  # the feed's order holds per plant; each plant has one event here
            assert sorted(client.ids) == sorted(feed)
        else:
            assert client.ids == feed
