"""Filtered watches of the feed on a real gunicorn (memory; Redis with two workers): a long-poll
and a stream send only what their filter selects, move past the rest, and a stream's heartbeats
are bookmarks a client reconnects from without loss and without 410, however much it did not
select was written meanwhile (a retention of 100 events, 500 writes)."""

from __future__ import annotations

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
