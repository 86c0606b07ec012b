"""The stream of server-sent events through the SSE clients people use, each written the naive
way (parse every event's data as JSON), across a stream's end and the reconnect with
`Last-Event-ID`: httpx-sse, sseclient-py, and the browser's own `EventSource` in headless
Chromium.

Streams here last 2 s with a heartbeat every second, and the writes come in three bursts with
pauses between them, so every client meets heartbeats after an event, a stream's end, writes made
while it is away, and a reconnect. `EventSource` cannot send `Authorization`: its page is served by
a relay on its own origin that adds the token and passes the service's bytes on unchanged, so
the browser's own parser reads exactly what the service wrote.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import requests
import sseclient
from httpx_sse import connect_sse

from tests.chromium import wait
from tests.integration.test_browser import browser  # noqa: F401  (the fixture)
from tests.servers import TOKEN, Gunicorn
from tests.threaded_http import serve_in_thread

AUTH = {"Authorization": f"Bearer {TOKEN}"}
STREAM_MAX = 2
#: Plants written in three bursts, with a pause longer than a heartbeat and a stream after each.
BURSTS = 3
PER_BURST = 4
PAUSE = 2.5


@pytest.fixture(scope="module")
def server():
    server = Gunicorn(env={"PLANTS_EVENTS_HEARTBEAT": "1", "PLANTS_EVENTS_STREAM_MAX": str(STREAM_MAX)})
    yield server
    server.stop()


def now_cursor(server: Gunicorn) -> str:
    conn = server.connection()
    conn.request("GET", "/events?after=now", headers=AUTH)
    return json.loads(conn.getresponse().read())["next"]


def write_in_bursts(server: Gunicorn, first_id: int) -> tuple[list[int], threading.Thread]:
    """Create the plants in the background; answers their ids and the writing thread."""
    ids = [first_id + n for n in range(BURSTS * PER_BURST)]

    def write() -> None:
        for burst in range(BURSTS):
            for plant_id in ids[burst * PER_BURST : (burst + 1) * PER_BURST]:
                conn = server.connection()
                body = json.dumps({"id": plant_id, "name": f"Plant {plant_id}"})
                conn.request("POST", "/plants", body, {**AUTH, "Content-Type": "application/json"})
                assert conn.getresponse().status == 200
                time.sleep(0.2)
            if burst < BURSTS - 1:  # after the last burst nothing is written: no pause to wait
                time.sleep(PAUSE)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return ids, writer


class Follower:
    """What a client got: each event's record, id and retry, and how many connections it made."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.records: list[dict] = []
        #: The bookmarks (`bookmarks=true`): each block's id and data.
        self.bookmarks: list[tuple[str, dict]] = []
        self.retries: list[int | None] = []
        self.last_id: str | None = None
        self.connections = 0
        self.deadline = time.monotonic() + BURSTS * (PER_BURST * 0.2 + PAUSE) + 3 * STREAM_MAX + 10

    def wants_more(self) -> bool:
        mine = [record for record in self.records if record["plant"]["id"] in self.ids]
        return len(mine) < len(self.ids) and time.monotonic() < self.deadline

    def take(self, name: str, data: str, event_id: str, retry: int | None) -> None:
        """One event as the naive loop takes it: its data parsed as JSON, whatever it is."""
        record = json.loads(data)
        if name == "bookmark":
            self.bookmarks.append((event_id, record))
        else:
            self.records.append(record)
            self.retries.append(retry)
        self.last_id = event_id

    def headers(self) -> dict[str, str]:
        self.connections += 1
        return {**AUTH, **({"Last-Event-ID": self.last_id} if self.last_id else {})}

    def check(self) -> None:
        mine = [record["plant"]["id"] for record in self.records if record["plant"]["id"] in self.ids]
        assert mine == self.ids  # every one, once, in order
        assert {record["type"] for record in self.records} == {"plant.created"}
        assert self.connections >= 3  # it lived through streams' ends
        assert self.retries[0] == 3000  # the reconnection delay rode with the first event


def follow_with_httpx_sse(server: Gunicorn, path: str, follower: Follower) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as client:
        while follower.wants_more():
            with connect_sse(client, "GET", path, headers=follower.headers()) as source:
                for sse in source.iter_sse():
                    follower.take(sse.event, sse.data, sse.id, sse.retry)


def follow_with_sseclient_py(server: Gunicorn, path: str, follower: Follower) -> None:
    while follower.wants_more():
        headers = {**follower.headers(), "Accept": "text/event-stream"}
        url = f"http://127.0.0.1:{server.port}{path}"
        with requests.get(url, stream=True, headers=headers, timeout=10) as response:
            for event in sseclient.SSEClient(response).events():
                follower.take(
                    event.event, event.data, event.id, None if event.retry is None else int(event.retry)
                )


@pytest.mark.parametrize("bookmarks", [False, True])
def test_naive_python_clients_parse_every_event_across_reconnects(server, bookmarks):
    """httpx-sse and sseclient-py at once, on the same writes (each in a thread of its own); with
    `bookmarks=true`, each heartbeat is a bookmark they parse as any event."""
    cursor = now_cursor(server)
    path = f"/events?after={cursor}" + ("&bookmarks=true" if bookmarks else "")
    ids, writer = write_in_bursts(server, 730_300 if bookmarks else 730_000)
    followers = {follow: Follower(ids) for follow in (follow_with_httpx_sse, follow_with_sseclient_py)}
    failures: list[BaseException] = []

    def run(follow, follower: Follower) -> None:
        try:
            follow(server, path, follower)
        except BaseException as exc:  # a naive loop's JSONDecodeError, say: the test's failure
            failures.append(exc)

    threads = [threading.Thread(target=run, args=pair, daemon=True) for pair in followers.items()]
    for thread in threads:
        thread.start()
    for thread in [*threads, writer]:
        thread.join(60)
    assert failures == []
    for follower in followers.values():
        follower.check()
        assert bool(follower.bookmarks) == bookmarks  # a heartbeat a second, in pauses of 2.5 s
        assert all(data == {"next": event_id} for event_id, data in follower.bookmarks)


# --- the browser's EventSource --------------------------------------------------------------------

PAGE = """<!doctype html><meta charset="utf-8"><title>watch</title><script>
window.received = []; window.opens = 0; window.unnamed = 0;
const source = new EventSource("/events?after=CURSOR&bookmarks=true");
source.onopen = () => { window.opens += 1; };
source.onmessage = () => { window.unnamed += 1; };  // every event the service sends has a type
window.bookmarks = [];
source.addEventListener("bookmark", (event) => {
  window.bookmarks.push({ id: event.lastEventId, record: JSON.parse(event.data) });
});
for (const type of ["plant.created", "plant.updated", "plant.deleted", "gone"]) {
  source.addEventListener(type, (event) => {
    window.received.push({ type, id: event.lastEventId, record: JSON.parse(event.data) });
  });
}
</script>"""


class Relay(ThreadingHTTPServer):
    """The page, and `/events` relayed to the service with the token added: the service's bytes
    reach the browser unchanged, and the connection closes when the service's stream ends."""

    daemon_threads = True

    def __init__(self, upstream: Gunicorn, page: str) -> None:
        super().__init__(("127.0.0.1", 0), RelayHandler)
        self.upstream, self.page = upstream, page
        self.resumed_from: list[str] = []
        #: The target of each request for the feed, in order.
        self.asked: list[str] = []
        #: How many requests for the feed to answer 503 with `Retry-After: 1` first, as an
        #: overloaded service would.
        self.unavailable = 0
        self.relayed = bytearray()
        serve_in_thread(self)


class RelayHandler(BaseHTTPRequestHandler):
    server: Relay

    def do_GET(self) -> None:
        if not self.path.startswith("/events"):
            body = self.server.page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.server.asked.append(self.path)
        if self.server.unavailable:
            self.server.unavailable -= 1
            body = b'{"error":503,"message":"Busy: ask again later."}'
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        # The page's own token when it sends one (the fetch() client does), else the relay's.
        authorization = self.headers.get("Authorization") or AUTH["Authorization"]
        headers = {"Authorization": authorization, "Accept": self.headers.get("Accept", "")}
        if self.headers.get("Last-Event-ID"):
            headers["Last-Event-ID"] = self.headers["Last-Event-ID"]
            self.server.resumed_from.append(headers["Last-Event-ID"])
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream.port, timeout=30)
        conn.request("GET", self.path, headers=headers)
        response = conn.getresponse()
        self.send_response(response.status)
        self.send_header("Content-Type", response.headers["Content-Type"])
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for chunk in iter_read(response):
            self.server.relayed += chunk
            self.wfile.write(chunk)
            self.wfile.flush()
        conn.close()

    def log_message(self, format: str, *args: object) -> None:  # quiet: the test reads no log
        pass


def iter_read(response: http.client.HTTPResponse) -> Iterator[bytes]:
    while chunk := response.read1(65536):
        yield chunk


def arrived_ids(browser, ids: list[int], script: str) -> list[int]:  # noqa: F811 (the fixture's name)
    """The plant ids the page's `script` answers, once every one of `ids` arrived (or too many)."""

    def arrived(driver) -> bool:
        got = driver.execute_script(script)
        return [plant_id for plant_id in got if plant_id in ids] == ids or len(got) > len(ids)

    wait(browser, 3 * STREAM_MAX + 15).until(arrived)
    return browser.execute_script(script)


def test_the_browsers_eventsource_parses_every_event_across_reconnects(server, browser):  # noqa: F811
    cursor = now_cursor(server)
    relay = Relay(server, PAGE.replace("CURSOR", cursor))
    try:
        browser.get(f"http://127.0.0.1:{relay.server_address[1]}/")
        ids, writer = write_in_bursts(server, 730_100)
        writer.join(30)
        got = arrived_ids(browser, ids, "return window.received.map((event) => event.record.plant.id)")
        assert got == ids  # each once, in order
        received = browser.execute_script("return window.received")
        assert {event["type"] for event in received} == {"plant.created"}
        assert browser.execute_script("return window.opens") >= 2
        assert browser.execute_script("return window.unnamed") == 0
        # It reconnected after an event (streams end every 2 s, the bursts take 10 s), and each
        # reconnect resumed from the last event the browser had, by its id.
        assert relay.resumed_from
        # From an event's id or a bookmark's (a heartbeat's, with `bookmarks=true`).
        bookmarks = browser.execute_script("return window.bookmarks")
        assert bookmarks
        assert all(bookmark["record"] == {"next": bookmark["id"]} for bookmark in bookmarks)
        assert set(relay.resumed_from) <= {event["id"] for event in [*received, *bookmarks]}
        assert b"retry: 3000\n" in relay.relayed
        errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == []
    finally:
        relay.shutdown()
        relay.server_close()


def documented_fetch_client() -> str:
    """docs/change-feed.md's fetch() client, as written."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "change-feed.md").read_text("utf-8")
    return text.split("**In a browser**", 1)[1].split("```js\n", 1)[1].split("```", 1)[0]


def test_the_documented_browser_client_parses_every_event_across_reconnects(server, browser):  # noqa: F811
    """docs/change-feed.md's fetch() client, on a page of the service's origin (the relay's)."""
    code = documented_fetch_client()
    page = (
        f'<!doctype html><meta charset="utf-8"><title>watch</title><script>{code}\n'
        f'window.received = []; watch("{TOKEN}", (event) => window.received.push(event));</script>'
    )
    relay = Relay(server, page)
    try:
        browser.get(f"http://127.0.0.1:{relay.server_address[1]}/")
        wait(browser, 10).until(lambda _: relay.resumed_from)  # it took its position
        ids, writer = write_in_bursts(server, 730_200)
        writer.join(30)
        got = arrived_ids(browser, ids, "return window.received.map((event) => event.plant.id)")
        assert [plant_id for plant_id in got if plant_id in ids] == ids  # each once, in order
        assert len(relay.resumed_from) >= 3  # the first stream and the reconnects, each from its id
    finally:
        relay.shutdown()
        relay.server_close()


def test_the_documented_browser_client_stops_at_a_position_no_longer_kept(browser):  # noqa: F811
    """docs/change-feed.md's fetch() client from a position the feed no longer keeps: its 410 is
    not a network error to try again, and the client's promise rejects, telling its caller to
    list the plants again. It warned on the console and asked again every second, for good."""
    server = Gunicorn(env={"PLANTS_EVENTS_RETAIN": "10"})
    relay = None
    try:
        code = documented_fetch_client()
        cursor = now_cursor(server)
        for plant_id in range(730_300, 730_320):  # twice what the feed keeps
            conn = server.connection()
            body = json.dumps({"id": plant_id, "name": f"Plant {plant_id}"})
            conn.request("POST", "/plants", body, {**AUTH, "Content-Type": "application/json"})
            assert conn.getresponse().status == 200
        page = (
            f'<!doctype html><meta charset="utf-8"><title>watch</title><script>{code}\n'
            f'watch("{TOKEN}", () => {{}}, "{cursor}")'
            ".catch((error) => { window.failed = error.message; });"
            "</script>"
        )
        relay = Relay(server, page)
        browser.get(f"http://127.0.0.1:{relay.server_address[1]}/")
        wait(browser, 10).until(lambda driver: driver.execute_script("return window.failed"))
        assert "list the plants again" in browser.execute_script("return window.failed")
        assert relay.resumed_from == [cursor]  # asked once, not again and again
    finally:
        if relay is not None:
            relay.shutdown()
            relay.server_close()
        server.stop()


@pytest.mark.parametrize("from_now", [True, False], ids=["from-now", "from-a-position"])
def test_the_documented_browser_client_stops_at_a_refused_token(server, browser, from_now):  # noqa: F811
    """docs/change-feed.md's fetch() client with a token the service refuses (expired, revoked):
    its 401 rejects the client's promise, telling its caller to renew the token, as the Python
    client's raises. It warned on the console and asked again every second, for good."""
    position = "" if from_now else f', "{now_cursor(server)}"'
    page = (
        f'<!doctype html><meta charset="utf-8"><title>watch</title><script>{documented_fetch_client()}\n'
        f'watch("not-a-token-of-this-service", () => {{}}{position})'
        ".catch((error) => { window.failed = error.message; });"
        "</script>"
    )
    relay = Relay(server, page)
    try:
        browser.get(f"http://127.0.0.1:{relay.server_address[1]}/")
        wait(browser, 10).until(lambda driver: driver.execute_script("return window.failed"))
        assert browser.execute_script("return window.failed").startswith("401: ")
        time.sleep(2.5)  # longer than the client's pause between two tries
        assert len(relay.asked) == 1  # asked once, not again and again
    finally:
        relay.shutdown()
        relay.server_close()


@pytest.mark.parametrize("from_now", [True, False], ids=["from-now", "from-a-position"])
def test_the_documented_browser_client_asks_again_after_a_503s_retry_after(server, browser, from_now):  # noqa: F811
    """A 503 (or 429) is for a while: the fetch() client asks again once `Retry-After` has passed
    and goes on, where a 401 stops it. From now on, its first read (its position, `after=now`) is
    asked again alike: it rejected the client's promise."""
    position = "" if from_now else f', "{now_cursor(server)}"'
    page = (
        f'<!doctype html><meta charset="utf-8"><title>watch</title><script>{documented_fetch_client()}\n'
        f'window.received = []; watch("{TOKEN}", (event) => window.received.push(event){position})'
        ".catch((error) => { window.failed = error.message; });"
        "</script>"
    )
    relay = Relay(server, page)
    relay.unavailable = 2
    try:
        browser.get(f"http://127.0.0.1:{relay.server_address[1]}/")
        wait(browser, 15).until(lambda _: relay.resumed_from)  # past the two 503s
        ids, writer = write_in_bursts(server, 730_400 if from_now else 730_600)
        writer.join(30)
        got = arrived_ids(browser, ids, "return window.received.map((event) => event.plant.id)")
        assert [plant_id for plant_id in got if plant_id in ids] == ids
        assert browser.execute_script("return window.failed") is None
        assert len(relay.asked) >= 3
    finally:
        relay.shutdown()
        relay.server_close()
