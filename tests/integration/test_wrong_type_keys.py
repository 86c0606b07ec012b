"""A key under the store's prefix that holds another type than the service writes there (another
program's string at `{prefix}:events`, the count, an index leaf): a write that meets it answers the
JSON 503 and writes nothing, where Redis, which does not roll a script back, kept the half of it
done before (a plant stored and counted with no event; a plant deleted with none). Once the key
is removed, the same request does the whole write, its event included."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from app.extension import plants_state
from app.store.redis.groups import Groups
from tests.conftest import redis_settings

MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture
def store_settings(redis_server):
    return redis_settings(redis_server)


@pytest.fixture
def raw(redis_server):
    client = redis.Redis(unix_socket_path=str(redis_server.socket))
    yield client
    client.close()


def _state(raw: redis.Redis, tag: str) -> dict[bytes, Any]:
    """Every key of the store, dumped: what a write may change."""
    return {key: raw.dump(key) for key in sorted(raw.keys(f"{tag}*"))}


def _events(client, auth) -> list[tuple[str, int]]:
    response = client.get("/events?limit=1000", headers=auth)
    assert response.status_code == 200, response.get_data()
    return [(event["type"], event["plant"]["id"]) for event in response.get_json()["events"]]


#: Each write, as the client sends it, on a store holding plant 7 (`Boston fern`, tag `fern`).
WRITES: dict[str, tuple[str, str, dict | None, dict]] = {
    "create": ("POST", "/plants", {"id": 8, "name": "Palm", "tag": "palm"}, {}),
    "put creates": ("PUT", "/plants/9", {"name": "Ivy", "tag": "palm"}, {}),
    "patch moves its tag": ("PATCH", "/plants/7", {"tag": "palm"}, MERGE),
    "patch renames": ("PATCH", "/plants/7", {"name": "Sword fern"}, MERGE),
    "delete": ("DELETE", "/plants/7", None, {}),
}
#: Each key made of another type, after the group's hash tag: the feed's stream, the count, the
#: `palm` tag's leaf (its index is empty: its first leaf), the `fern` tag's leaf (holding plant 7).
WRONG = {"feed": ":events", "count": ":count", "new tag's leaf": ":l::tpalm", "old tag's leaf": ":l::tfern"}


@pytest.mark.parametrize("wrong", list(WRONG))
@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_that_meets_a_key_of_another_type_writes_nothing(
    make_app, auth, raw, store_settings, wrong, write
):
    app = make_app()
    # The app makes the cursor key in a thread as it starts (app/extension.py): made here first,
    # a loaded machine's late thread cannot add it between the two states below.
    plants_state(app).store.cursor_key()
    client = app.test_client()
    tag = Groups(store_settings["PLANTS_STORE_PREFIX"], count=1, capacity=10, cluster=False).tags[0]
    fern = {"id": 7, "name": "Boston fern", "tag": "fern"}
    assert client.post("/plants", json=fern, headers=auth).status_code == 200
    key = tag + WRONG[wrong]
    kept = raw.dump(key)
    raw.delete(key)
    raw.rpush(key, "another program's")  # a list: no command of the service's takes it
    before = _state(raw, tag)
    method, path, body, headers = WRITES[write]
    answer = client.open(path, method=method, json=body, headers={**auth, **headers})
    after = _state(raw, tag)
    if answer.status_code == 503:
        assert answer.get_json()["error"], answer.get_data()
        assert after == before, f"{write} wrote half of itself: {set(after.items()) ^ set(before.items())}"
        raw.delete(key)
        if kept is not None:
            raw.restore(key, 0, kept)
        answer = client.open(path, method=method, json=body, headers={**auth, **headers})
    assert answer.status_code in (200, 201, 204), answer.get_data()
    # The write is whole: its event follows the create of plant 7 (when the feed was kept).
    kind = {"POST": "created", "PUT": "created", "PATCH": "updated", "DELETE": "deleted"}[method]
    plant_id = int(path.rsplit("/", 1)[1]) if method != "POST" else body["id"]
    events = _events(client, auth)
    assert events[-1] == (f"plant.{kind}", plant_id), events


#: The webhook endpoints' keys a registration writes or reads, after their hash tag.
HOOK_KEYS = {"sequence": ":seq"}


@pytest.mark.parametrize("wrong", list(HOOK_KEYS))
def test_a_registration_that_meets_a_key_of_another_type_writes_nothing(
    make_app, auth, raw, store_settings, wrong
):
    app = make_app(PLANTS_WEBHOOKS_DELIVER="false")
    client = app.test_client()
    hook = {"url": "https://8.8.8.8/hook"}
    assert client.post("/webhooks", json=hook, headers=auth).status_code == 201
    tag = "{" + store_settings["PLANTS_STORE_PREFIX"] + ":hooks}"
    key = tag + HOOK_KEYS[wrong]
    kept = raw.dump(key)
    raw.delete(key)
    raw.rpush(key, "another program's")
    before = _state(raw, tag)
    answer = client.post("/webhooks", json={"url": "https://8.8.4.4/hook"}, headers=auth)
    assert answer.status_code == 503, answer.get_data()
    after = _state(raw, tag)
    # Nothing of the registration is kept: no endpoint (its signing secret) that no list names.
    assert after == before, f"the registration wrote half of itself: {sorted(set(after) ^ set(before))}"
    raw.delete(key)
    raw.restore(key, 0, kept)
    assert client.post("/webhooks", json={"url": "https://8.8.4.4/hook"}, headers=auth).status_code == 201
    assert len(client.get("/webhooks", headers=auth).get_json()["webhooks"]) == 2
