"""A write wakes each waiting watcher it concerns once in the worker that made it, on a shared
store too: there the worker's feed listener hears the same write again from the store, and skips
it (recognised by the write's own mark, never by its plant), so the worker's histogram
`plants_watch_woken_per_change` counts each write once. One worker; a second stream that no
write concerns keeps a watcher waiting, so that every wake-up the worker makes is counted."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from app import create_app
from app.extension import plants_state
from app.store.redis.listener import REST_SECONDS
from tests.conftest import settings_for_store
from tests.feed_client import Client, Stream
from tests.integration.test_watch import now_cursor
from tests.integration.test_watch_wakeups import woken_histogram
from tests.servers import TOKEN, Gunicorn

#: The writes this worker makes to the watched plant, each one the stream selects.
OWN_WRITES = 3


@pytest.fixture(scope="module", params=["memory", "redis", "cluster"])
def server(request):
    settings = settings_for_store(request, request.param)
    streams = {"PLANTS_EVENTS_HEARTBEAT": "30", "PLANTS_EVENTS_STREAM_MAX": "60"}
    server = Gunicorn(env={**settings, **streams, "WEB_CONCURRENCY": "1"})
    yield server, settings
    server.stop()


def changes_and_woken(server: Gunicorn) -> tuple[float, float]:
    histogram = woken_histogram(server)
    return (
        histogram.get("plants_watch_woken_per_change_count", 0),
        histogram.get("plants_watch_woken_per_change_sum", 0),
    )


def wait_for_changes(server: Gunicorn, count: float, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while changes_and_woken(server)[0] < count:
        assert time.monotonic() < deadline, f"fewer than {count} changes counted"
        time.sleep(0.05)


def plant_events(stream: Stream) -> Iterator[dict[str, str]]:
    return (block for block in stream.blocks() if block.get("event", "").startswith("plant."))


def test_each_write_wakes_its_watcher_once_in_the_worker_that_made_it(server):
    server, settings = server
    tag, plant_id = f"wo-{uuid.uuid4().hex[:8]}", 750_000
    client = Client(server.port)
    cursor = now_cursor(server)
    idle = Stream(server.port, f"/events?tags={tag}-idle&after={cursor}")
    watched = Stream(server.port, f"/events?tags={tag}&after={cursor}", timeout=20)
    # Another process on the same store (none on memory): what it writes reaches the worker's
    # watchers through the worker's listener only.
    other = None if not settings else create_app({"TESTING": True, "PLANTS_API_TOKENS": [TOKEN], **settings})
    try:
        assert idle.status == watched.status == 200
        events = plant_events(watched)
        if other is not None:
            # The listener's start (after the first watch's first read) wakes every watcher once.
            wait_for_changes(server, 1)
        status, _ = client.call("PUT", f"/plants/{plant_id}", {"name": "n0", "tag": tag})
        assert status == 201
        assert next(events)["event"] == "plant.created"
        before = changes_and_woken(server)
        for n in range(1, OWN_WRITES + 1):
            status, _ = client.call("PATCH", f"/plants/{plant_id}", {"name": f"n{n}"})
            assert status == 200
            assert f'"n{n}"' in next(events)["data"]
            # The listener reads what comes within its rest as one batch, and judges a batch in one
            # wake-up: a write heard twice would hide in it. Apart, each is heard alone.
            time.sleep(3 * REST_SECONDS)
        writes = OWN_WRITES
        if other is not None:
            # The same plant (on a cluster, the same group's stream, which one listener thread reads
            # in order): once the stream has it, the listener has heard this worker's writes too.
            answer = other.test_client().patch(
                f"/plants/{plant_id}", json={"name": "other"}, headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert answer.status_code == 200
            assert '"other"' in next(events)["data"]
            writes += 1
        after = changes_and_woken(server)
        changes, woken = after[0] - before[0], after[1] - before[1]
        # Each write judged once (the idle stream's watcher waits throughout), waking the stream once
        # at most (a write made while it still sent the last has it read on at once instead).
        assert changes <= writes, (changes, woken, writes)
        assert woken <= writes, (changes, woken, writes)
    finally:
        idle.close()
        watched.close()
        client.close()
        if other is not None:
            plants_state(other).close()
