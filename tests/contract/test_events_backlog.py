"""A filtered watch behind a long backlog it does not select: more events than one filtered read
takes (app/watch/filters.py's budget) stand between its position and the next it selects, and the
feed is quiet after. The watch reads on at once, as a page followed at once would: a long-poll
answers the event, a stream sends it, without waiting for a write, a heartbeat or their end.

On the memory store, whose writes are fast enough to make the backlog in a test; the reading on is
the watch's own (app/watch/watches.py), the same on every store."""

from __future__ import annotations

import json

import pytest

from app.store.base import UNCONDITIONAL
from tests.contract.test_events import brief

#: Three filtered reads' worth: the page's, the long-poll's first, and its last at its deadline.
BACKLOG = 30_050


@pytest.fixture(params=["memory"])
def store_settings(request):
    return {}


def behind_a_backlog(client, auth, store) -> str:
    """A position followed by BACKLOG events that `tags=mine` does not select, then one it does."""
    start = client.get("/events?after=now", headers=auth).json["next"]
    for n in range(BACKLOG):
        store.change(1000 + n % 50, f"v{n}", "other", UNCONDITIONAL, create=True)
    assert client.put("/plants/7", json={"name": "mine", "tag": "mine"}, headers=auth).status_code == 201
    return start


def test_a_filtered_long_poll_reads_past_a_long_backlog_to_the_event_it_selects(make_app, auth):
    app = make_app()
    client = app.test_client()
    start = behind_a_backlog(client, auth, app.extensions["plants"].store)
    page = client.get(f"/events?after={start}&tags=mine&wait=3", headers=auth)
    assert page.status_code == 200, page.json
    assert [brief(event) for event in page.json["events"]] == [("plant.created", 7, "mine", "mine")]
    # Its position is that event's: the feed's end.
    after = page.json["next"]
    assert client.get(f"/events?after={after}", headers=auth).json["events"] == []


def test_a_filtered_stream_reads_past_a_long_backlog_before_its_heartbeat(make_app, auth):
    # The stream ends after 4 seconds, long before its first heartbeat: all it sends, it sends
    # because it read on.
    app = make_app(PLANTS_EVENTS_HEARTBEAT=3600, PLANTS_EVENTS_STREAM_MAX=4)
    client = app.test_client()
    start = behind_a_backlog(client, auth, app.extensions["plants"].store)
    headers = {**auth, "Accept": "text/event-stream"}
    response = client.get(f"/events?after={start}&tags=mine", headers=headers)
    assert response.status_code == 200
    blocks = [dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
              for block in response.get_data(as_text=True).split("\n\n")]  # fmt: skip
    events = [json.loads(block["data"]) for block in blocks if block.get("event", "").startswith("plant.")]
    assert [brief(event) for event in events] == [("plant.created", 7, "mine", "mine")]
