"""GET /events, the change feed: what is recorded, paging exactly once, `after=now`, retention
(410), every refusal, and the sync recipe, on memory, a real Redis and a real cluster."""

from __future__ import annotations

import base64
import random
import re
import threading
from typing import Any

import pytest

from app.store import EVENT_TYPES
from app.store.redis.groups import BUCKETS
from tests.conftest import STORES_AND_CLUSTER, settings_for_store
from tests.contract.test_metrics import samples
from tests.contract.test_pages import forged
from tests.helpers import apply_events, error_of

MERGE_PATCH = "application/merge-patch+json"
TIME = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")


@pytest.fixture(params=STORES_AND_CLUSTER)
def store_settings(request):
    return settings_for_store(request, request.param)


def follow(client: Any, auth: dict, after: str | None = None, limit: int = 100) -> tuple[list[dict], str]:
    """Every event after `after` (from the oldest kept when None), page by page; and the last `next`."""
    events: list[dict] = []
    while True:
        query = f"limit={limit}" + ("" if after is None else f"&after={after}")
        response = client.get(f"/events?{query}", headers=auth)
        assert response.status_code == 200, response.json
        assert set(response.json) == {"events", "next"}
        events += response.json["events"]
        if not response.json["events"]:
            return events, response.json["next"]
        after = response.json["next"]


def brief(event: dict) -> tuple:
    plant = event["plant"]
    return event["type"], plant["id"], plant["name"], plant.get("tag")


def test_every_change_that_takes_effect_is_one_event_in_order(client, auth, store_settings):
    start = client.get("/events?after=now", headers=auth).json["next"]
    assert (
        client.post("/plants", json={"id": 1, "name": "Fern", "tag": "green"}, headers=auth).status_code
        == 200
    )
    assert client.put("/plants/2", json={"name": "Palm"}, headers=auth).status_code == 201
    assert client.put("/plants/1", json={"name": "Fern", "tag": "blue"}, headers=auth).status_code == 200
    patched = client.patch("/plants/1", json={"tag": None}, headers=auth, content_type=MERGE_PATCH)
    assert patched.status_code == 200
    assert client.delete("/plants/2", headers=auth).status_code == 204
    events, _ = follow(client, auth, start)
    changes = [
        ("plant.created", 1, "Fern", "green"),
        ("plant.created", 2, "Palm", None),
        ("plant.updated", 1, "Fern", "blue"),
        ("plant.updated", 1, "Fern", None),
        ("plant.deleted", 2, "Palm", None),  # the plant as it was
    ]
    for plant_id in (1, 2):  # each plant's events in the order its changes took effect, on any store
        mine = [event for event in events if event["plant"]["id"] == plant_id]
        assert [brief(event) for event in mine] == [change for change in changes if change[1] == plant_id]
        assert [event["time"] for event in mine] == sorted(event["time"] for event in mine)
    if "cluster" not in store_settings.get("PLANTS_STORE_URL", ""):
        # One log: the order in time across plants too. A cluster keeps a log per bucket group.
        assert [brief(event) for event in events] == changes
    for event in events:
        assert set(event) == {"type", "plant", "time"}
        assert TIME.match(event["time"])
    assert "tag" not in next(event for event in events if event["plant"]["id"] == 2)["plant"]


def test_nothing_is_recorded_for_a_change_that_does_not_take_effect(client, auth):
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth).status_code == 200
    etag = client.get("/plants/1", headers=auth).headers["ETag"]
    start = client.get("/events?after=now", headers=auth).json["next"]
    attempts = [
        client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth),  # a replay
        client.post("/plants", json={"id": 1, "name": "Palm"}, headers=auth),  # a conflict
        client.put("/plants/1", json={"name": "Fern"}, headers=auth),  # identical values
        client.patch("/plants/1", json={}, headers=auth),
        client.put("/plants/1", json={"name": "X"}, headers={**auth, "If-Match": '"other"'}),
        client.put("/plants/1", json={"name": "X"}, headers={**auth, "If-None-Match": "*"}),
        client.delete("/plants/1", headers={**auth, "If-Match": '"other"'}),
        client.patch("/plants/9", json={"name": "X"}, headers=auth),  # absent
        client.delete("/plants/9", headers=auth),
        client.post("/plants", json={"id": 2, "name": ""}, headers=auth),  # refused body
        client.put("/plants/1", json={"name": "X", "colour": "red"}, headers=auth),
    ]
    assert [response.status_code for response in attempts] == [
        200,
        409,
        200,
        200,
        412,
        412,
        412,
        404,
        404,
        400,
        400,
    ]
    assert client.get(f"/events?after={start}", headers=auth).json == {"events": [], "next": start}
    assert client.get("/plants/1", headers=auth).headers["ETag"] == etag


def test_pages_of_seven_yield_every_event_once_and_each_plant_in_order(client, auth):
    """Writers in threads, each owning its plants; a follower reads pages of 7 meanwhile."""
    start = client.get("/events?after=now", headers=auth).json["next"]
    acknowledged: dict[int, list[tuple]] = {}

    def write(worker: int) -> None:
        rng = random.Random(worker)
        for step in range(40):
            plant_id = worker * 1000 + rng.randrange(5)
            history = acknowledged.setdefault(plant_id, [])
            name = f"n{step}"
            if rng.random() < 0.25:
                if client.delete(f"/plants/{plant_id}", headers=auth).status_code == 204:
                    history.append(("plant.deleted", plant_id))
            else:
                status = client.put(f"/plants/{plant_id}", json={"name": name}, headers=auth).status_code
                history.append(("plant.created" if status == 201 else "plant.updated", plant_id, name))

    threads = [threading.Thread(target=write, args=(worker,)) for worker in range(6)]
    for thread in threads:
        thread.start()
    seen: list[dict] = []
    after = start
    while any(thread.is_alive() for thread in threads):
        page, after = follow(client, auth, after, limit=7)
        seen += page
    for thread in threads:
        thread.join()
    rest, _ = follow(client, auth, after, limit=7)
    seen += rest
    for plant_id, history in acknowledged.items():
        mine = [event for event in seen if event["plant"]["id"] == plant_id]
        got = [
            (event["type"], plant_id)
            if event["type"] == "plant.deleted"
            else (event["type"], plant_id, event["plant"]["name"])
            for event in mine
        ]
        assert got == history
    assert len(seen) == sum(len(history) for history in acknowledged.values())


def test_after_now_answers_no_event_and_an_empty_page_keeps_the_position(client, auth):
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
    now = client.get("/events?after=now", headers=auth)
    assert now.status_code == 200
    assert now.json["events"] == []
    again = client.get(f"/events?after={now.json['next']}", headers=auth).json
    assert again == {"events": [], "next": now.json["next"]}
    client.post("/plants", json={"id": 2, "name": "Palm"}, headers=auth)
    later = client.get(f"/events?after={now.json['next']}", headers=auth).json
    assert [brief(event) for event in later["events"]] == [("plant.created", 2, "Palm", None)]


def test_without_after_the_feed_starts_at_the_oldest_event(client, auth):
    for plant_id in range(3):
        client.post("/plants", json={"id": plant_id, "name": f"p{plant_id}"}, headers=auth)
    events, _ = follow(client, auth)
    assert sorted(event["plant"]["id"] for event in events) == [0, 1, 2]


def one_group_ids(count: int) -> list[int]:
    """Ids that share a bucket group on a cluster too (bucket ≡ 0 modulo 24), so that one stream
    receives them all."""
    return [n * 24 for n in range(count) if n * 24 < BUCKETS]


def test_past_the_retention_is_410_and_the_kept_events_follow_without_a_gap(make_app, auth):
    """With `MAXLEN ~`, Redis trims whole stream nodes (100 entries): 300 events are enough."""
    client = make_app(PLANTS_EVENTS_RETAIN=5).test_client()
    start = client.get("/events?after=now", headers=auth).json["next"]
    ids = one_group_ids(300)
    for plant_id in ids:
        assert client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=auth).status_code == 200
    record = error_of(client.get(f"/events?after={start}", headers=auth), 410)
    assert "GET /plants" in record["message"]
    kept, _ = follow(client, auth, limit=7)
    assert 5 <= len(kept) < 300
    # The oldest kept, then every later one: the last events, with no gap.
    assert [event["plant"]["id"] for event in kept] == ids[-len(kept) :]


def test_a_retention_of_0_turns_the_feed_off(make_app, auth):
    client = make_app(PLANTS_EVENTS_RETAIN=0).test_client()
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth).status_code == 200
    record = error_of(client.get("/events", headers=auth), 404)
    assert "PLANTS_EVENTS_RETAIN" in record["message"]
    error_of(client.get("/events?after=now", headers=auth), 404)


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=x", "limit"),
        ("limit=1&limit=2", "limit"),
        ("after=", "after"),
        ("after=later", "after"),
        ("after=not*base64", "after"),
        ("after=" + "A" * 1401, "after"),
        ("after=AAAA", "after"),
        ("after=AgAAAAAAAAAAp_1uyFVTm7-rsLAL", "after"),  # the right shape, not signed
        ("tags=fern&tags=", "tags"),  # a filter now: an empty tag is refused
        ("since=now", "since"),
    ],
)
def test_a_bad_query_is_400_naming_the_parameter(client, auth, query, parameter):
    record = error_of(client.get(f"/events?{query}", headers=auth), 400)
    assert set(record["details"]) == {parameter}


@pytest.mark.parametrize("value", ["now", "later", "not*base64", "AAAA"])
def test_a_last_event_id_that_is_no_cursor_says_to_send_a_streams_id(client, auth, value):
    """A stream's client holds ids, not pages: "pass back the `next` of a page" misdirected it."""
    headers = {**auth, "Accept": "text/event-stream", "Last-Event-ID": value}
    record = error_of(client.get("/events", headers=headers), 400)
    assert record["details"] == {
        "Last-Event-ID": [
            "Not an id this service's stream sent: send back the `id` of the last event or bookmark"
            " it received, unchanged, or leave the header out to start at `after`."
        ]
    }


def test_a_forged_cursor_or_a_page_cursor_is_400(client, auth):
    for plant_id in range(3):
        client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=auth)
    cursor = client.get("/events?limit=1", headers=auth).json["next"]
    record = error_of(client.get(f"/events?after={forged(cursor)}", headers=auth), 400)
    assert set(record["details"]) == {"after"}
    page_cursor = client.get("/plants?limit=1", headers=auth).json["next"]
    record = error_of(client.get(f"/events?after={page_cursor}", headers=auth), 400)
    assert set(record["details"]) == {"after"}
    record = error_of(client.get(f"/plants?after={cursor}", headers=auth), 400)
    assert set(record["details"]) == {"after"}


def test_read_only_tokens_read_the_feed_and_no_token_is_401(make_app, auth):
    client = make_app(PLANTS_READ_TOKENS="reader-token").test_client()
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
    reader = {"Authorization": "Bearer reader-token"}
    assert [brief(event) for event in client.get("/events", headers=reader).json["events"]] == [
        ("plant.created", 1, "Fern", None)
    ]
    error_of(client.get("/events"), 401)
    response = client.post("/events", headers=auth)
    error_of(response, 405)
    assert response.headers["Allow"] == "GET, HEAD, OPTIONS"


def test_the_feed_counts_under_the_token_rate_limit(make_app, auth):
    client = make_app(PLANTS_RATE_LIMIT="2/minute").test_client()
    assert [client.get("/events", headers=auth).status_code for _ in range(3)] == [200, 200, 429]


def test_metrics_count_events_appended_and_read(client, auth):
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
    client.put("/plants/1", json={"name": "Palm"}, headers=auth)
    client.delete("/plants/1", headers=auth)
    follow(client, auth)
    scrape = samples(client.get("/metrics", headers=auth).get_data(as_text=True))
    for kind in ("plant.created", "plant.updated", "plant.deleted"):
        assert scrape[("plants_events_appended_total", (("type", kind),))] == 1
    assert scrape[("plants_events_read_total", (("route", "/events"),))] == 3


def test_the_sync_recipe_copies_the_store_while_writers_run(client, auth):
    """Position first, then the list, then the feed from that position: the copy equals the store."""
    for plant_id in range(60):
        client.post("/plants", json={"id": plant_id, "name": "v0", "tag": "t"}, headers=auth)
    stop = threading.Event()

    def write(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            plant_id = rng.randrange(80)
            action = rng.random()
            if action < 0.3:
                client.delete(f"/plants/{plant_id}", headers=auth)
            elif action < 0.6:
                client.put(f"/plants/{plant_id}", json={"name": f"v{rng.randrange(9)}"}, headers=auth)
            else:
                client.patch(f"/plants/{plant_id}", json={"tag": rng.choice(["a", "b", None])}, headers=auth)

    writers = [threading.Thread(target=write, args=(seed,)) for seed in range(3)]
    for writer in writers:
        writer.start()
    try:
        position = client.get("/events?after=now", headers=auth).json["next"]
        copy = every_plant(client, auth, limit=7)
        for _ in range(5):
            events, position = follow(client, auth, position, limit=9)
            apply_events(copy, events)
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    events, _ = follow(client, auth, position, limit=9)
    apply_events(copy, events)
    assert copy == every_plant(client, auth, limit=1000)


def every_plant(client: Any, auth: dict, limit: int, query: str = "") -> dict[int, dict]:
    """Every page of GET /plants (with `query`, `&tags=...`) from the first: the items by id."""
    plants: dict[int, dict] = {}
    after = ""
    while True:
        page = client.get(f"/plants?limit={limit}{query}{after}", headers=auth).json
        plants.update({item["id"]: item for item in page["plants"]})
        if "next" not in page:
            return plants
        after = f"&after={page['next']}"


def test_a_forged_feed_cursor_is_named_for_the_feed_not_for_tags(client, auth):
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
    cursor = client.get("/events?limit=1", headers=auth).json["next"]
    raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw[-1] ^= 1  # one bit of the signature
    forged = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    message = error_of(client.get(f"/events?after={forged}", headers=auth), 400)["details"]["after"][0]
    assert "feed" in message
    assert "tags" not in message


def test_each_write_keeps_its_request_id_with_its_event_and_the_feed_does_not_show_it(client, auth, store):
    start = client.get("/events?after=now", headers=auth).json["next"]
    writes = [
        client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth),
        client.put("/plants/2", json={"name": "Palm"}, headers=auth),
        client.patch("/plants/1", json={"tag": "green"}, headers=auth, content_type=MERGE_PATCH),
        client.delete("/plants/2", headers=auth),
    ]
    assert [response.status_code for response in writes] == [200, 201, 200, 204]
    entries, _ = store.feed_entries(None, 100)
    # Each event with its write's id. On a cluster plants 1 and 2 are in streams of their own, and
    # two writes within one millisecond may read back in either order (docs/change-feed.md).
    made = {(EVENT_TYPES[entry.event.kind], entry.event.plant_id): entry.origin for entry in entries[-4:]}
    changes = [("plant.created", 1), ("plant.created", 2), ("plant.updated", 1), ("plant.deleted", 2)]
    assert made == {change: w.headers["X-Request-Id"] for change, w in zip(changes, writes, strict=True)}
    events, _ = follow(client, auth, start)
    assert len(events) == 4
    assert all(set(event) == {"type", "time", "plant"} for event in events), events
