"""`GET /events?snapshot=true`: the plants that match now, a bookmark marked `initial_end`, then
the live events; applied as the document says, an exact copy even while four writers change the
plants, on memory, a real Redis and a real cluster; and a snapshot held a page at a time."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import STORES_AND_CLUSTER, settings_for_store
from tests.contract.test_events import every_plant
from tests.contract.test_events_filters import apply_filtered, followed
from tests.helpers import error_of
from tests.servers import TOKEN

ROOT = Path(__file__).parents[2]
STREAM = {"Accept": "text/event-stream"}
MERGE_PATCH = "application/merge-patch+json"


@pytest.fixture(params=STORES_AND_CLUSTER)
def store_settings(request):
    return settings_for_store(request, request.param)


@pytest.fixture
def client(make_app):
    return make_app(PLANTS_EVENTS_HEARTBEAT=1, PLANTS_EVENTS_STREAM_MAX=2).test_client()


def blocks(text: str) -> list[dict[str, str]]:
    """The stream's blocks that carry data, each as its fields (comments and `retry:` skipped)."""
    parsed = []
    for block in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.split("\n") if line and not line.startswith((":", "retry"))
        )
        if "data" in fields:
            parsed.append(fields)
    return parsed


def apply_stream(copy: dict[int, dict], parsed: list[dict[str, str]], tags: set[str]) -> str:
    """Apply a snapshot stream as the document says; its last position."""
    seen: set[int] = set()
    last = ""
    for block in parsed:
        data = json.loads(block["data"])
        if block["event"] == "plant.existing":
            copy[data["plant"]["id"]] = data["plant"]
            seen.add(data["plant"]["id"])
        elif block["event"] == "bookmark":
            if data.get("initial_end"):  # the snapshot is whole: what it did not name is gone
                for plant_id in set(copy) - seen:
                    del copy[plant_id]
        else:
            apply_filtered(copy, [data], tags)
        last = block.get("id", last)
    return last


def test_a_snapshot_then_live_events_is_an_exact_copy_under_four_writers(client, auth):
    tags = {"a", "b"}
    for plant_id in range(60):
        client.post("/plants", json={"id": plant_id, "name": "v0", "tag": "abc"[plant_id % 3]}, headers=auth)
    stop = threading.Event()

    def write(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            plant_id = rng.randrange(90)
            action = rng.random()
            if action < 0.25:
                client.delete(f"/plants/{plant_id}", headers=auth)
            elif action < 0.5:
                client.post(
                    "/plants", json={"id": plant_id, "name": "new", "tag": rng.choice("abc")}, headers=auth
                )
            else:
                patch = {"tag": rng.choice(["a", "b", "c", None]), "name": f"v{rng.randrange(9)}"}
                client.patch(f"/plants/{plant_id}", json=patch, headers=auth, content_type=MERGE_PATCH)

    writers = [threading.Thread(target=write, args=(seed,)) for seed in range(4)]
    for writer in writers:
        writer.start()
    try:
        response = client.get("/events?snapshot=true&tags=a&tags=b", headers={**auth, **STREAM})
        assert response.status_code == 200
        parsed = blocks(response.get_data(as_text=True))  # the whole stream: it ends after 2 s
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    kinds = [block["event"] for block in parsed]
    ends = [
        n for n, block in enumerate(parsed) if block["event"] == "bookmark" and "initial_end" in block["data"]
    ]
    assert len(ends) == 1
    assert set(kinds[: ends[0]]) == {"plant.existing"}  # the snapshot, then its end, then live
    assert "plant.existing" not in kinds[ends[0] :]
    end = parsed[ends[0]]
    assert json.loads(end["data"]) == {"next": end["id"], "initial_end": True}
    copy: dict[int, dict] = {}
    last = apply_stream(copy, parsed, tags)
    events, _ = followed(client, auth, last, "tags=a&tags=b")  # what the stream had no time for
    apply_filtered(copy, events, tags)
    assert copy == every_plant(client, auth, 1000, "&tags=a&tags=b")


def read_until(client, path: str, headers: dict[str, str], marker: bytes) -> str:
    """A stream read up to the chunk that holds `marker`, then closed: a snapshot comes whole before
    its `initial_end` bookmark, so the rest of a 2 s stream need not be waited for."""
    response = client.get(path, headers=headers, buffered=False)
    assert response.status_code == 200
    text = b""
    try:
        for chunk in response.response:
            text += chunk
            if marker in text:
                break
    finally:
        response.close()
    assert marker in text
    return text.decode()


def test_a_snapshot_by_ids_names_the_plants_that_exist_and_match(client, auth):
    client.post("/plants", json={"id": 1, "name": "Fern", "tag": "green"}, headers=auth)
    client.post("/plants", json={"id": 2, "name": "Palm", "tag": "blue"}, headers=auth)
    path = "/events?snapshot=true&ids=1&ids=2&ids=3&tags=green"
    parsed = blocks(read_until(client, path, {**auth, **STREAM}, b'"initial_end"'))
    assert [json.loads(block["data"]) for block in parsed if block["event"] == "plant.existing"] == [
        {"type": "plant.existing", "plant": {"id": 1, "name": "Fern", "tag": "green"}}
    ]
    # Reconnecting with the bookmark's id resumes from it: no snapshot again (the whole stream read).
    end = next(block for block in parsed if block["event"] == "bookmark")
    again = client.get("/events?snapshot=true&ids=1", headers={**auth, **STREAM, "Last-Event-ID": end["id"]})
    assert "plant.existing" not in again.get_data(as_text=True)


def test_a_snapshot_streams_reconnect_still_sends_bookmarks(client, auth):
    """`EventSource` reconnects with the same URL (`snapshot=true`) and `Last-Event-ID`: the stream
    resumes without a snapshot, and, a stream with `snapshot=true`, still sends a bookmark at each
    heartbeat (docs/change-feed.md, "Bookmarks"). Unfiltered, it sent `: keep-alive` comments."""
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
    parsed = blocks(read_until(client, "/events?snapshot=true", {**auth, **STREAM}, b'"initial_end"'))
    end = next(block for block in parsed if block["event"] == "bookmark")
    again = client.get("/events?snapshot=true", headers={**auth, **STREAM, "Last-Event-ID": end["id"]})
    text = again.get_data(as_text=True)  # the whole 2 s stream: a heartbeat a second
    assert "plant.existing" not in text
    assert ": keep-alive" not in text
    marks = [block for block in blocks(text) if block["event"] == "bookmark"]
    assert marks
    assert all(block["id"] == end["id"] for block in marks)
    assert all(json.loads(block["data"]) == {"next": end["id"]} for block in marks)


@pytest.mark.parametrize(
    ("query", "headers"),
    [("snapshot=true", {}), ("snapshot=true&after=now", STREAM), ("snapshot=yes", STREAM)],
)
def test_a_snapshot_outside_a_fresh_stream_is_a_400_naming_it(client, auth, query, headers):
    details = error_of(client.get(f"/events?{query}", headers={**auth, **headers}), 400)["details"]
    assert list(details) == ["snapshot"]


# In a process of its own: tracemalloc counts every thread's allocations, and a test run before
# this one in the same process may leave threads (a store's listener, a deliverer) at work.
HELD_A_PAGE_AT_A_TIME = f"""
import json, tracemalloc
from app import create_app
from app.extension import plants_state

app = create_app({{"TESTING": True, "PLANTS_API_TOKENS": [{TOKEN!r}], "PLANTS_MAX_PLANTS": 300_000}})
store = app.extensions["plants"].store
for plant_id in range(150_000):
    store.create(plant_id, f"plant number {{plant_id:06d}}", "many")
headers = {{"Authorization": "Bearer {TOKEN}", "Accept": "text/event-stream"}}
response = app.test_client().get("/events?snapshot=true&tags=many", headers=headers, buffered=False)
sent = 0
tracemalloc.start()
for chunk in response.response:
    sent += len(chunk)
    if b"initial_end" in chunk:
        break
_, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
response.close()
plants_state(app).close()
print(json.dumps({{"sent": sent, "peak": peak}}))
"""


def test_a_snapshot_is_held_a_page_at_a_time():
    """Measured in a fresh process on the memory store (Redis's pages are read the same way)."""
    ran = subprocess.run(
        [sys.executable, "-c", HELD_A_PAGE_AT_A_TIME],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    )
    measured = json.loads(ran.stdout)
    sent, peak = measured["sent"], measured["peak"]
    assert sent > 10_000_000  # 150,000 plants' blocks
    assert peak < sent / 10  # one page's, not the snapshot's
