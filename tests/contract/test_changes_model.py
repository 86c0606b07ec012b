"""A hypothesis state machine: any sequence of creates, replaces, merge patches, deletes and
conditional variants, against a plain dict model of the store. Statuses, bodies, ETags and a
final walk all agree, on the memory store and a real Redis; and the change feed, replayed over an
empty dict, equals the store at every step."""

from __future__ import annotations

import uuid
from typing import ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from app import create_app
from app.store import plant_etag
from tests.conftest import redis_settings
from tests.servers import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
IDS = st.integers(min_value=1, max_value=6)
NAMES = st.sampled_from(["Fern", "Moss", "Ivy", "Fern "])
TAGS = st.none() | st.sampled_from(["green", "blue"])
#: Which precondition a change sends: none, the current ETag, a stale one, `*`, or If-None-Match: *.
CONDITIONS = st.sampled_from(["none", "current", "stale", "star", "none-match-star"])
STALE = '"0000000000000000"'


def record(name: str, tag: str | None) -> dict:
    return {"name": name} if tag is None else {"name": name, "tag": tag}


class StoreMachine(RuleBasedStateMachine):
    settings_for_store: ClassVar[dict] = {}

    def __init__(self) -> None:
        super().__init__()
        settings_ = {**self.settings_for_store}
        if "PLANTS_STORE_PREFIX" in settings_:
            settings_["PLANTS_STORE_PREFIX"] = f"model-{uuid.uuid4().hex}"
        self.app = create_app({"TESTING": True, "PLANTS_API_TOKENS": TOKEN, **settings_})
        self.client = self.app.test_client()
        self.model: dict[int, tuple[str, str | None]] = {}
        #: The feed replayed from the first event, and the position it reached.
        self.replayed: dict[int, tuple[str, str | None]] = {}
        self.position = ""

    def teardown(self) -> None:
        close = getattr(self.app.extensions["plants"].store, "close", None)
        if close:
            close()

    def headers(self, plant_id: int, condition: str) -> dict[str, str]:
        current = self.model.get(plant_id)
        if condition == "current":
            return {**AUTH, "If-Match": f'"{plant_etag(*current)}"' if current else STALE}
        if condition == "stale":
            return {**AUTH, "If-Match": STALE}
        if condition == "star":
            return {**AUTH, "If-Match": "*"}
        if condition == "none-match-star":
            return {**AUTH, "If-None-Match": "*"}
        return AUTH

    def passes(self, plant_id: int, condition: str) -> bool:
        """Whether the precondition lets a change of a present plant through."""
        present = plant_id in self.model
        return {
            "none": True, "current": present, "stale": False, "star": present, "none-match-star": not present,
        }[condition]  # fmt: skip

    def check(self, response, status: int, plant: tuple[str, str | None] | None = None) -> None:
        assert response.status_code == status, (response.status_code, status, response.get_data())
        if plant is not None:
            assert response.get_json() == record(*plant)
            assert response.headers["ETag"] == f'"{plant_etag(*plant)}"'

    @rule(plant_id=IDS, name=NAMES, tag=TAGS)
    def create(self, plant_id, name, tag):
        body = {"id": plant_id, **record(name, tag)}
        response = self.client.post("/plants", json=body, headers=AUTH)
        stored = self.model.get(plant_id)
        if stored is None:
            self.model[plant_id] = (name, tag)
            self.check(response, 200, (name, tag))
        else:
            self.check(
                response, 200 if stored == (name, tag) else 409, stored if stored == (name, tag) else None
            )

    @rule(plant_id=IDS, name=NAMES, tag=TAGS, condition=CONDITIONS)
    def put(self, plant_id, name, tag, condition):
        response = self.client.put(
            f"/plants/{plant_id}", json=record(name, tag), headers=self.headers(plant_id, condition)
        )
        present = plant_id in self.model
        if not self.passes(plant_id, condition):
            self.check(response, 412)
            return
        self.model[plant_id] = (name, tag)
        self.check(response, 200 if present else 201, (name, tag))

    @rule(
        plant_id=IDS,
        name=st.none() | NAMES,
        tag=st.sampled_from(["keep", "remove", "green", "blue"]),
        condition=CONDITIONS,
    )
    def patch(self, plant_id, name, tag, condition):
        patch = {} if name is None else {"name": name}
        if tag != "keep":
            patch["tag"] = None if tag == "remove" else tag
        response = self.client.patch(
            f"/plants/{plant_id}", json=patch, headers=self.headers(plant_id, condition)
        )
        stored = self.model.get(plant_id)
        if stored is None:
            self.check(response, 404)
            return
        if not self.passes(plant_id, condition):
            self.check(response, 412)
            return
        after = (patch.get("name", stored[0]), patch["tag"] if "tag" in patch else stored[1])
        self.model[plant_id] = after
        self.check(response, 200, after)

    @rule(plant_id=IDS, condition=CONDITIONS)
    def delete(self, plant_id, condition):
        response = self.client.delete(f"/plants/{plant_id}", headers=self.headers(plant_id, condition))
        if plant_id not in self.model:
            self.check(response, 404)
        elif not self.passes(plant_id, condition):
            self.check(response, 412)
        else:
            del self.model[plant_id]
            self.check(response, 204)

    @rule(plant_id=IDS)
    def conditional_get(self, plant_id):
        stored = self.model.get(plant_id)
        if stored is None:
            self.check(self.client.get(f"/plants/{plant_id}", headers=AUTH), 404)
            return
        response = self.client.get(
            f"/plants/{plant_id}", headers={**AUTH, "If-None-Match": f'"{plant_etag(*stored)}"'}
        )
        self.check(response, 304)
        self.check(
            self.client.get(f"/plants/{plant_id}", headers={**AUTH, "If-None-Match": STALE}), 200, stored
        )

    @invariant()
    def the_feed_replayed_equals_the_model(self):
        while True:
            page = self.client.get(f"/events?limit=3{self.position}", headers=AUTH).get_json()
            for event in page["events"]:
                plant = event["plant"]
                if event["type"] == "plant.deleted":
                    del self.replayed[plant["id"]]  # a delete follows the plant's create
                else:
                    assert (event["type"] == "plant.created") == (plant["id"] not in self.replayed)
                    self.replayed[plant["id"]] = (plant["name"], plant.get("tag"))
            self.position = f"&after={page['next']}"
            if not page["events"]:
                break
        assert self.replayed == self.model

    @invariant()
    def a_walk_equals_the_model(self):
        seen, url = [], "/plants?limit=2"
        while url:
            page = self.client.get(url, headers=AUTH).get_json()
            seen += [(item["id"], item["name"], item.get("tag")) for item in page["plants"]]
            url = f"/plants?limit=2&after={page['next']}" if "next" in page else None
        assert seen == [(plant_id, *self.model[plant_id]) for plant_id in sorted(self.model)]
        for tag in ("green", "blue"):
            tagged = self.client.get(f"/plants?tags={tag}", headers=AUTH).get_json()["plants"]
            assert [item["id"] for item in tagged] == sorted(
                i for i, plant in self.model.items() if plant[1] == tag
            )


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_any_sequence_of_changes_agrees_with_a_dict(request, store):
    store_settings = {} if store == "memory" else redis_settings(request.getfixturevalue("redis_server"))
    machine = type(f"StoreMachine_{store}", (StoreMachine,), {"settings_for_store": store_settings})
    run = settings(max_examples=60 if store == "memory" else 30, stateful_step_count=25, deadline=None)(
        machine
    )
    run.TestCase().runTest()
