"""A filtered stream on a shared store (a single Redis, a cluster; two workers) that its writes
do not concern passes over them without reading the feed at its heartbeats, moving to a feed's
end once the listener has heard through it (app/watch/watches.py: `EventStream._passes_over`).
Moving so, it loses nothing and sends nothing twice: with writers racing its heartbeats, it sends
exactly the events its filter selects (in the feed's order on a single Redis: a cluster's merge
orders the groups' events by their entry IDs, which a stream and a later page see differently
when the nodes' clocks differ); its bookmarks never stand behind an
earlier one; and, quiet for a few heartbeats after the writes, its last bookmark stands past all
of them."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.conftest import settings_for_store
from tests.integration.test_watch import get, now_cursor
from tests.integration.test_watch_filters import streamed, write
from tests.servers import Gunicorn

#: Each stream lasts 10 s: about 5 s of writes, then quiet heartbeats (1 s apart).
SETTINGS = {"PLANTS_EVENTS_HEARTBEAT": "1", "PLANTS_EVENTS_STREAM_MAX": "10", "WEB_CONCURRENCY": "2"}
WRITING_SECONDS = 5.0


@pytest.fixture(scope="module", params=["redis", "cluster"])
def server(request):
    server = Gunicorn(env={**SETTINGS, **settings_for_store(request, request.param)})
    yield server, request.param
    server.stop()


def write_for_a_while(server: Gunicorn, mine: list[int], threads: int = 3) -> None:
    """Writers in `threads` threads for WRITING_SECONDS: mostly tags the stream does not follow,
    each thread's every tenth write one it does (its id kept in `mine`)."""
    ends = time.monotonic() + WRITING_SECONDS

    def writer(number: int) -> None:
        n = 0
        while time.monotonic() < ends:
            plant_id = 730_000 + number * 10_000 + n
            if n % 10 == 9:
                mine.append(plant_id)
            write(server, plant_id, "po-mine" if n % 10 == 9 else f"po-other-{n % 3}")
            n += 1

    workers = [threading.Thread(target=writer, args=(number,)) for number in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()


def events_after(server: Gunicorn, cursor: str, query: str = "") -> list[dict]:
    """Every event of the feed after `cursor` (with the filter `query`), page after page."""
    found: list[dict] = []
    while True:
        status, _, body = get(server, f"/events?after={cursor}&limit=1000{query}")
        assert status == 200, body
        page = json.loads(body)
        found += page["events"]
        if not page["events"]:
            return found
        cursor = page["next"]


def test_a_stream_passing_over_writes_sends_what_it_selects_once_and_bookmarks_past_the_rest(server):
    server, kind = server
    cursor = now_cursor(server)
    mine: list[int] = []
    blocks = streamed(server, "/events?tags=po-mine&after=" + cursor, during=lambda: threading.Thread(
        target=write_for_a_while, args=(server, mine), daemon=True
    ).start())  # fmt: skip
    sent = [json.loads(block["data"]) for block in blocks if block.get("event", "").startswith("plant.")]
    selected = events_after(server, cursor, "&tags=po-mine")
    assert len(selected) == len(mine) > 0
    sent_ids = [(e["type"], e["plant"]["id"]) for e in sent]
    selected_ids = [(e["type"], e["plant"]["id"]) for e in selected]
    assert sent_ids == selected_ids if kind == "redis" else sorted(sent_ids) == sorted(selected_ids)
    bookmarks = [block["id"] for block in blocks if block.get("event") == "bookmark"]
    assert len(bookmarks) >= 3, blocks
    behind = [len(events_after(server, bookmark)) for bookmark in bookmarks]
    assert behind == sorted(behind, reverse=True), behind  # none stands behind an earlier one
    assert behind[-1] == 0, (behind, blocks[-6:])  # the last stands past every write
