"""A write wakes only the watchers it may concern, on a real gunicorn: 100 streams, each
following a tag of its own, and a create per tag wakes one stream, not 100; the worker's own
histogram (`plants_watch_woken_per_change`) says so, and each stream still gets its plant."""

from __future__ import annotations

import json
import time

import pytest

from tests.contract.test_metrics import samples
from tests.integration.test_watch import dechunk, frames, get, open_stream, read_stream
from tests.integration.test_watch_filters import write
from tests.servers import Gunicorn

STREAMS = 100


@pytest.fixture(scope="module")
def server():
    server = Gunicorn(
        env={
            "PLANTS_EVENTS_HEARTBEAT": "30",
            "PLANTS_EVENTS_STREAM_MAX": "60",
            "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": str(STREAMS + 10),
        }
    )
    yield server
    server.stop()


def woken_histogram(server: Gunicorn) -> dict[str, float]:
    status, _, body = get(server, "/metrics")
    assert status == 200
    scrape = samples(body.decode())
    return {
        dict(labels).get("le", name): value
        for (name, labels), value in scrape.items()
        if name.startswith("plants_watch_woken_per_change")
    }


def test_a_create_wakes_the_stream_of_its_tag_not_every_stream(server):
    _, _, body = get(server, "/events?after=now")
    cursor = json.loads(body)["next"]
    socks = [open_stream(server, path=f"/events?after={cursor}&tags=wk-{n}") for n in range(STREAMS)]
    try:
        # Each stream's head: it is parked from then on.
        heads = [read_stream(sock, until=b"\r\n\r\n", seconds=10) for sock in socks]
        assert all(head.startswith(b"HTTP/1.1 200 ") for head in heads)
        time.sleep(0.5)
        before = woken_histogram(server)
        for n in range(20):
            write(server, 740_000 + n, f"wk-{n}")
        for n in range(20):
            data = heads[n] + read_stream(socks[n], until=b"plant.created", seconds=10)
            _, text = dechunk(data)
            events = [json.loads(block["data"]) for block in frames(text) if "event" in block]
            assert [event["plant"]["id"] for event in events] == [740_000 + n]
        after = woken_histogram(server)
        changes = after["plants_watch_woken_per_change_count"] - before.get(
            "plants_watch_woken_per_change_count", 0
        )
        at_most_two = after["2"] - before.get("2", 0)
        assert changes >= 20
        assert at_most_two == changes  # no change woke more than two streams
        woken = after["plants_watch_woken_per_change_sum"] - before.get(
            "plants_watch_woken_per_change_sum", 0
        )
        assert woken <= 2 * changes
    finally:
        for sock in socks:
            sock.close()
