"""GET /events's filters (`tags`, `ids`, `types`) on pages: an event is selected when its plant
matches before or after the change, a filtered page moves past what it does not select, and a
filtered copy kept under concurrent writers equals `GET /plants?tags=...`; on memory, a real
Redis and a real cluster."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from tests.conftest import STORES_AND_CLUSTER, settings_for_store
from tests.contract.test_events import brief, every_plant, follow
from tests.helpers import error_of

MERGE_PATCH = "application/merge-patch+json"


@pytest.fixture(params=STORES_AND_CLUSTER)
def store_settings(request):
    return settings_for_store(request, request.param)


def followed(client: Any, auth: dict, after: str, query: str, limit: int = 100) -> tuple[list[dict], str]:
    """Every event after `after` that `query` (a filter) selects, page by page; and the last `next`."""
    events: list[dict] = []
    while True:
        response = client.get(f"/events?after={after}&limit={limit}&{query}", headers=auth)
        assert response.status_code == 200, response.json
        events += response.json["events"]
        if not response.json["events"]:
            return events, response.json["next"]
        after = response.json["next"]


def apply_filtered(copy: dict[int, dict], events: list[dict], tags: set[str]) -> None:
    """The follower's rule (the document's): an upsert of a created, updated or existing plant
    that matches, a delete of a deleted one or of one that no longer matches."""
    for event in events:
        plant = event["plant"]
        if event["type"] == "plant.deleted" or plant.get("tag") not in tags:
            copy.pop(plant["id"], None)
        else:
            copy[plant["id"]] = plant


def test_a_tag_filter_selects_the_plants_that_had_the_tag_before_or_after(client, auth):
    start = client.get("/events?after=now", headers=auth).json["next"]
    client.post("/plants", json={"id": 1, "name": "Fern", "tag": "green"}, headers=auth)
    client.post("/plants", json={"id": 2, "name": "Palm", "tag": "blue"}, headers=auth)
    client.post("/plants", json={"id": 3, "name": "Moss"}, headers=auth)
    client.patch("/plants/1", json={"tag": "blue"}, headers=auth, content_type=MERGE_PATCH)  # out of green
    client.patch("/plants/3", json={"tag": "green"}, headers=auth, content_type=MERGE_PATCH)  # into green
    client.put("/plants/2", json={"name": "Palm 2", "tag": "blue"}, headers=auth)  # blue only
    client.patch("/plants/3", json={"tag": None}, headers=auth, content_type=MERGE_PATCH)  # out again
    client.delete("/plants/1", headers=auth)  # was blue
    events, _ = followed(client, auth, start, "tags=green", limit=2)
    assert set(map(brief, events)) == set(
        [
            ("plant.created", 1, "Fern", "green"),
            ("plant.updated", 1, "Fern", "blue"),
            ("plant.updated", 3, "Moss", "green"),
            ("plant.updated", 3, "Moss", None),
        ]
    )
    both, _ = followed(client, auth, start, "tags=green&tags=blue&types=plant.deleted")
    assert [brief(event) for event in both] == [("plant.deleted", 1, "Fern", "blue")]
    by_id, _ = followed(client, auth, start, "ids=3&ids=2&types=plant.created&types=plant.deleted")
    assert set(map(brief, by_id)) == {
        ("plant.created", 2, "Palm", "blue"),
        ("plant.created", 3, "Moss", None),
    }


def test_a_filtered_page_that_finds_nothing_answers_the_end_of_what_it_read(client, auth):
    start = client.get("/events?after=now", headers=auth).json["next"]
    for plant_id in range(30):
        client.post("/plants", json={"id": plant_id, "name": "n", "tag": "other"}, headers=auth)
    page = client.get(f"/events?after={start}&tags=mine&limit=5", headers=auth)
    assert page.status_code == 200
    assert page.json["events"] == []
    assert page.json["next"] != start
    # The position is the feed's end: nothing after it, filtered or not.
    assert client.get(f"/events?after={page.json['next']}", headers=auth).json["events"] == []
    client.post("/plants", json={"id": 99, "name": "mine", "tag": "mine"}, headers=auth)
    events, _ = followed(client, auth, page.json["next"], "tags=mine")
    assert [brief(event) for event in events] == [("plant.created", 99, "mine", "mine")]


def test_a_filtered_follower_never_falls_out_of_the_retention_it_keeps_up_with(make_app, auth):
    client = make_app(PLANTS_EVENTS_RETAIN=100).test_client()
    after = client.get("/events?after=now", headers=auth).json["next"]
    for round_ in range(25):  # 1,000 writes it does not select, 40 between its requests
        for plant_id in range(40):
            client.put(f"/plants/{plant_id}", json={"name": f"v{round_}", "tag": "other"}, headers=auth)
        page = client.get(f"/events?after={after}&tags=mine", headers=auth)
        assert page.status_code == 200, page.json
        assert page.json["events"] == []
        after = page.json["next"]
    client.post("/plants", json={"id": 500, "name": "mine", "tag": "mine"}, headers=auth)
    page = client.get(f"/events?after={after}&tags=mine", headers=auth)
    assert [brief(event) for event in page.json["events"]] == [("plant.created", 500, "mine", "mine")]


def test_a_filtered_copy_equals_the_tagged_plants_under_concurrent_writers(client, auth):
    tags = {"a", "b"}
    for plant_id in range(40):
        client.post("/plants", json={"id": plant_id, "name": "v0", "tag": "abc"[plant_id % 3]}, headers=auth)
    stop = threading.Event()

    def write(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            plant_id = rng.randrange(60)
            action = rng.random()
            if action < 0.25:
                client.delete(f"/plants/{plant_id}", headers=auth)
            elif action < 0.5:
                tag = rng.choice(["a", "b", "c", None])
                client.put(
                    f"/plants/{plant_id}", json={"name": f"v{rng.randrange(9)}", "tag": tag}, headers=auth
                )
            else:
                patch = {"tag": rng.choice(["a", "b", "c", None])}
                client.patch(f"/plants/{plant_id}", json=patch, headers=auth, content_type=MERGE_PATCH)

    writers = [threading.Thread(target=write, args=(seed,)) for seed in range(4)]
    for writer in writers:
        writer.start()
    query = "tags=a&tags=b"
    try:
        position = client.get("/events?after=now", headers=auth).json["next"]
        copy = {k: v for k, v in every_plant(client, auth, limit=7).items() if v.get("tag") in tags}
        for _ in range(5):
            events, position = followed(client, auth, position, query, limit=9)
            apply_filtered(copy, events, tags)
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    events, _ = followed(client, auth, position, query, limit=9)
    apply_filtered(copy, events, tags)
    assert copy == every_plant(client, auth, 1000, "&tags=a&tags=b")


def test_feed_cursors_are_positions_of_the_whole_feed_whatever_the_filter(client, auth):
    client.post("/plants", json={"id": 1, "name": "Fern", "tag": "green"}, headers=auth)
    filtered = client.get("/events?tags=green&limit=1", headers=auth).json["next"]
    events, _ = follow(client, auth, filtered)
    assert events == []  # the filtered position is the unfiltered one after the same event


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("ids=abc", "ids"),
        ("ids=" + "&ids=".join(str(n) for n in range(101)), "ids"),
        ("ids=99999999999999999999", "ids"),
        ("types=plant.moved", "types"),
        ("tags=", "tags"),
        ("tags=" + "x" * 101, "tags"),
        ("bookmarks=yes", "bookmarks"),
    ],
)
def test_a_bad_filter_is_a_400_naming_its_parameter(client, auth, query, parameter):
    details = error_of(client.get(f"/events?{query}", headers=auth), 400)["details"]
    assert list(details) == [parameter]


@pytest.mark.parametrize("parameter", ["bookmarks", "snapshot"])
@pytest.mark.parametrize("value", ["1", "yes", "True", ""])
def test_a_flag_of_the_feed_refused_says_the_two_values_it_takes(client, auth, parameter, value):
    """`bookmarks=1` was refused with marshmallow's `Not a valid boolean.`, where `1` is a boolean
    to many clients (and the service's own settings read it so): the message names the values."""
    stream = {**auth, "Accept": "text/event-stream"}
    details = error_of(client.get(f"/events?{parameter}={value}", headers=stream), 400)["details"]
    assert details == {parameter: ["Must be `true` or `false`."]}


@pytest.mark.parametrize(
    ("query", "parameter", "says"),
    [
        ("&".join(f"tags=t{n}" for n in range(21)), "tags", "At most 20 distinct tags"),
        ("&".join(f"ids={n}" for n in range(101)), "ids", "At most 100 distinct ids"),
    ],
    ids=["tags", "ids"],
)
def test_too_many_filter_values_is_a_400_that_counts_values_not_characters(
    client, auth, query, parameter, says
):
    """21 tags were refused with marshmallow's `Length must be between 1 and 20.`, which reads as a
    tag's length in characters (a tag may have 100): the message counts distinct values."""
    details = error_of(client.get(f"/events?{query}", headers=auth), 400)["details"]
    assert details[parameter] == [f"{says} (a value given twice counts once)."]


@pytest.mark.parametrize(
    ("query", "selected"),
    [
        ("&".join(["tags=green"] * 21 + [f"tags=t{n}" for n in range(19)]), [1]),  # 40 given, 20 distinct
        ("&".join(["ids=1", "ids=1e0", "ids=1.0"] * 34 + [f"ids={n}" for n in range(2, 101)]), [1, 2]),
        ("&".join(["types=plant.created"] * 4), [1, 2]),  # more values than there are types
    ],
    ids=["tags", "ids", "types"],
)
def test_a_value_repeated_counts_once_against_its_filters_bound(client, auth, query, selected):
    """A filter is a set: a client that builds it from a list with repeats is not refused as if it
    named more values than the bound, and gets what the distinct values select."""
    for plant_id, tag in ((1, "green"), (2, "blue")):
        client.post("/plants", json={"id": plant_id, "name": "Fern", "tag": tag}, headers=auth)
    response = client.get(f"/events?{query}", headers=auth)
    assert response.status_code == 200, response.json
    assert [event["plant"]["id"] for event in response.json["events"]] == selected
