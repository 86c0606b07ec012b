"""Filtered watches of the feed on a real gunicorn (memory; Redis with two workers): a long-poll
and a stream send only what their filter selects, move past the rest, and a stream's heartbeats
are bookmarks a client reconnects from without loss and without 410, however much it did not
select was written meanwhile (a retention of 100 events, 500 writes). Many filtered streams woken
together after a long stretch they pass over leave the memory store's one request thread free
for /healthz within a couple of seconds."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable

import pytest

from tests.conftest import redis_settings
from tests.helpers import wait_for_watches, watches_started
from tests.integration.test_watch import (
    dechunk,
    frames,
    get,
    in_background,
    now_cursor,
    open_stream,
    read_stream,
)
from tests.servers import TOKEN, Gunicorn

SETTINGS = {
    "PLANTS_EVENTS_HEARTBEAT": "1",
    "PLANTS_EVENTS_STREAM_MAX": "4",
    "PLANTS_EVENTS_RETAIN": "100",
}


@pytest.fixture(scope="module", params=["memory", "redis"])
def server(request):
    env = dict(SETTINGS)
    if request.param == "redis":
        env.update(redis_settings(request.getfixturevalue("redis_server")), WEB_CONCURRENCY="2")
    server = Gunicorn(env=env)
    yield server
    server.stop()


def write(server: Gunicorn, plant_id: int, tag: str, name: str = "n") -> None:
    conn = server.connection()
    body = json.dumps({"name": name, "tag": tag})
    conn.request(
        "PUT",
        f"/plants/{plant_id}",
        body,
        {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    assert conn.getresponse().status in (200, 201)
    conn.close()


def streamed(server: Gunicorn, path: str, headers: dict | None = None, during=None) -> list[dict[str, str]]:
    """The blocks of one whole stream (it ends after PLANTS_EVENTS_STREAM_MAX), `during()` run
    while it is open."""
    sock = open_stream(server, headers, path=path)
    # Its first chunk (`retry:`) is sent once it reads from its position: a cursor the writes
    # below push out of the retention is still read, not 410.
    opened = read_stream(sock, until=b"retry:", seconds=20)
    if during is not None:
        during()
    data = opened + read_stream(sock, seconds=20)
    sock.close()
    assert data.startswith(b"HTTP/1.1 200 "), data[:300]
    return frames(dechunk(data)[1])


def followed(server: Gunicorn, path: str, writes: Callable[[], None]) -> list[dict[str, str]]:
    """The blocks of the streams a client follows while `writes()` runs: the first from `path`,
    each next from the last id it was sent (`Last-Event-ID`, as EventSource and the documented
    client reconnect at once), until one ends after the writes did. A loaded machine can take
    longer over them than a stream lasts (PLANTS_EVENTS_STREAM_MAX): a client that waited for the
    writes before it reconnected would be 410, rightly."""
    failed: list[BaseException] = []

    def write_all() -> None:
        try:
            writes()
        except BaseException as exc:  # re-raised below, in the test's thread
            failed.append(exc)

    writer = threading.Thread(target=write_all, daemon=True)
    blocks = streamed(server, path, during=writer.start)
    while writer.is_alive():
        ids = [block["id"] for block in blocks if "id" in block]
        blocks += streamed(server, path, {"Last-Event-ID": ids[-1]} if ids else None)
    writer.join()
    if failed:
        raise failed[0]
    return blocks


def test_a_filtered_long_poll_waits_through_what_it_does_not_select(server):
    cursor = now_cursor(server)
    polls = watches_started(server, TOKEN)
    thread, result = in_background(get, server, f"/events?after={cursor}&wait=20&tags=lp-mine")
    wait_for_watches(server, TOKEN, polls + 1)
    for plant_id in range(720_000, 720_005):
        write(server, plant_id, "lp-other")
    time.sleep(0.5)
    assert thread.is_alive()  # nothing it selects yet
    write(server, 720_010, "lp-mine")
    thread.join(10)
    status, _, body = result["answer"]
    assert status == 200
    page = json.loads(body)
    assert [event["plant"]["id"] for event in page["events"]] == [720_010]
    status, _, body = get(server, f"/events?after={page['next']}")
    assert json.loads(body)["events"] == []


def test_a_filtered_long_poll_that_finds_nothing_answers_the_end_of_the_feed(server):
    cursor = now_cursor(server)
    polls = watches_started(server, TOKEN)
    thread, result = in_background(get, server, f"/events?after={cursor}&wait=2&ids=720099")
    wait_for_watches(server, TOKEN, polls + 1)
    for plant_id in range(720_020, 720_025):
        write(server, plant_id, "lp-other")
    thread.join(10)
    status, _, body = result["answer"]
    page = json.loads(body)
    assert (status, page["events"]) == (200, [])
    assert page["next"] != cursor
    _, _, body = get(server, f"/events?after={page['next']}")
    assert json.loads(body)["events"] == []  # it stood at the end of what was written


def test_a_filtered_stream_sends_what_it_selects_and_bookmarks_to_resume_from(server):
    cursor = now_cursor(server)

    def writes() -> None:
        write(server, 720_030, "st-other")
        write(server, 720_031, "st-mine")
        write(server, 720_031, "st-other")  # moves out: the stream sees it leave
        write(server, 720_032, "st-other")

    blocks = streamed(server, f"/events?after={cursor}&tags=st-mine", during=writes)
    events = [json.loads(block["data"]) for block in blocks if block.get("event", "").startswith("plant.")]
    assert [(e["type"], e["plant"]["id"], e["plant"]["tag"]) for e in events] == [
        ("plant.created", 720_031, "st-mine"),
        ("plant.updated", 720_031, "st-other"),
    ]
    bookmarks = [block for block in blocks if block.get("event") == "bookmark"]
    assert bookmarks, blocks  # one a heartbeat (1 s) in a stream of 4 s
    assert all(json.loads(block["data"]) == {"next": block["id"]} for block in bookmarks)
    assert not any(block.get("comment") == ": keep-alive" for block in blocks)
    # The last bookmark stands past every write, the unselected one too.
    _, _, body = get(server, f"/events?after={bookmarks[-1]['id']}")
    assert json.loads(body)["events"] == []


def test_a_stream_reconnecting_from_its_bookmark_outlives_the_retention_it_does_not_select(server):
    cursor = now_cursor(server)

    def many() -> None:  # five times the retention, none selected
        for n in range(500):
            write(server, 721_000 + n % 50, f"rt-{n % 7}", name=f"v{n}")

    first = followed(server, f"/events?after={cursor}&tags=rt-mine", many)
    assert not any(block.get("event") == "gone" for block in first), first
    bookmark = [block for block in first if block.get("event") == "bookmark"][-1]["id"]
    again = streamed(
        server,
        "/events?tags=rt-mine",
        {"Last-Event-ID": bookmark},
        during=lambda: write(server, 721_900, "rt-mine"),
    )
    events = [json.loads(block["data"]) for block in again if block.get("event") == "plant.created"]
    assert [event["plant"]["id"] for event in events] == [721_900]


def test_an_unfiltered_stream_asks_for_bookmarks_or_keeps_its_comments(server):
    cursor = now_cursor(server)
    plain = streamed(server, f"/events?after={cursor}")
    assert any(block.get("comment") == ": keep-alive" for block in plain)
    assert not any(block.get("event") == "bookmark" for block in plain)
    asked = streamed(server, f"/events?after={cursor}&bookmarks=true")
    assert any(block.get("event") == "bookmark" for block in asked)


@pytest.fixture(scope="module", params=["memory", "redis"])
def quiet_server(request):
    """Heartbeats far apart: a stream's only chance to tell its position is its reads."""
    env = dict(SETTINGS, PLANTS_EVENTS_HEARTBEAT="60", PLANTS_EVENTS_STREAM_MAX="8")
    if request.param == "redis":
        env.update(redis_settings(request.getfixturevalue("redis_server")), WEB_CONCURRENCY="2")
    server = Gunicorn(env=env)
    yield server
    server.stop()


def test_a_stream_tells_its_position_before_what_it_passes_over_leaves_the_retention(quiet_server):
    # A client that keeps following holds the last id it was sent; a reconnect from it must not be
    # 410 however much its filter passed over since, heartbeat or not (a retention of 100 events).
    server = quiet_server
    cursor = now_cursor(server)

    def writes() -> None:
        write(server, 722_000, "qs-mine")
        for n in range(300):  # three times the retention, none selected
            write(server, 722_100 + n % 40, f"qs-{n % 5}", name=f"v{n}")
        write(server, 722_001, "qs-mine")

    blocks = followed(server, f"/events?after={cursor}&tags=qs-mine", writes)
    created = [i for i, block in enumerate(blocks) if block.get("event") == "plant.created"]
    assert len(created) == 2, blocks
    # The client dropped just before the second event: it holds the last id sent before it.
    held = [block["id"] for block in blocks[: created[1]] if "id" in block][-1]
    status, _, body = get(server, f"/events?after={held}&tags=qs-mine")
    assert status == 200, body
    assert [event["plant"]["id"] for event in json.loads(body)["events"]] == [722_001]


#: Filtered streams parked at one position, each with a filter of its own (no two share a read).
PARKED_STREAMS = 300
#: The events written meanwhile that none of them selects, under the retention's half (no sweep).
PASSED_OVER = 10_000
#: A wide behavioural deadline, not a speed figure (as test_watch_liveness.py's): with every
#: woken stream building an entry for each event it passed over, /healthz waited 7 to 10 s here.
LIVENESS_DEADLINE = 2.0


def put_many(port: int, first_id: int, count: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    for n in range(count):
        conn.request(
            "PUT", f"/plants/{first_id + n % 500}", json.dumps({"name": f"v{n}", "tag": "busy"}), headers
        )
        response = conn.getresponse()
        response.read()
        assert response.status in (200, 201)
    conn.close()


def healthz_seconds(port: int) -> float:
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=LIVENESS_DEADLINE + 30)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
    conn.close()
    return time.monotonic() - started


def test_filtered_streams_woken_together_after_a_long_stretch_they_pass_over_leave_the_worker_answering():
    """The memory store's one request thread reads every woken stream's feed: streams that wake
    together after a long stretch none of them selects (the wake-up of every watch each half
    retention, their heartbeats, one write they all select) each walk that stretch, /healthz
    waits its turn behind them all, and streams woken but not yet served were closed unsent
    when their turn came later than the worker's read timeout."""
    server = Gunicorn(env={"PLANTS_EVENTS_HEARTBEAT": "60", "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": "400"})
    socks = []
    try:
        cursor = now_cursor(server)
        shared = 730_000  # every stream selects it, and one more id of its own
        for n in range(PARKED_STREAMS):
            socks.append(open_stream(server, path=f"/events?after={cursor}&ids={shared}&ids={731_000 + n}"))
        writers = [
            threading.Thread(target=put_many, args=(server.port, 740_000 + 1000 * k, PASSED_OVER // 2))
            for k in range(2)
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(120)
        time.sleep(0.5)  # every stream parked again
        write(server, shared, "all")  # wakes every stream at once
        seconds = healthz_seconds(server.port)
        received = 0
        for sock in socks:
            sock.settimeout(60)
            _, text = dechunk(read_stream(sock, until=b'"id":730000', seconds=60))
            received += b'"id":730000' in text
    finally:
        for sock in socks:
            sock.close()
        server.stop()
    assert seconds < LIVENESS_DEADLINE, seconds
    assert received == PARKED_STREAMS
