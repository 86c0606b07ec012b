"""A store that refuses a drain's calls (a real redis-server whose endpoint attempts key another
program made a string): the acknowledgement stores nothing rather than half of itself, and the
deliverer backs off before it sends the event again, rather than leasing and sending it again at
once, hundreds of times a second; once the store takes the acknowledgement, the event is delivered
and recorded once."""

from __future__ import annotations

import time

import pytest

from app.extension import plants_state
from tests.conftest import redis_settings
from tests.integration.test_webhook_delivery import wait_until
from tests.receiver import Receiver
from tests.servers import TOKEN, RedisServer

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def store_settings(redis_server):
    return redis_settings(redis_server)


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.stop()


def test_an_ack_refused_stores_nothing_and_the_event_is_sent_again_only_after_a_wait(
    make_app, store_settings, redis_server, receiver
):
    client = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1").test_client()
    hook = client.post("/webhooks", json={"url": receiver.url}, headers=AUTH).json
    tag = "{" + store_settings["PLANTS_STORE_PREFIX"] + ":hooks}"
    endpoint_key, attempts_key = f"{tag}:e:{hook['id']}", f"{tag}:a:{hook['id']}"
    before = redis_server.command("HGET", endpoint_key, "position")
    # Another program's string where the endpoint's attempts (a list) are kept: each
    # acknowledgement of the delivery is refused.
    assert redis_server.command("SET", attempts_key, "not a list") == "OK"
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH).status_code == 200
    wait_until(lambda: len(receiver.deliveries) >= 2, timeout=10, what="the event sent again")
    time.sleep(1.5)
    sent = len(receiver.deliveries)
    # Sent again after a wait, not at once: a loop sends hundreds a second.
    assert sent <= 4, sent
    assert {delivery.id for delivery in receiver.deliveries} == {receiver.deliveries[0].id}
    # Nothing of the refused acknowledgements was stored: not the position, nor their token.
    assert redis_server.command("HGET", endpoint_key, "position") == before
    assert redis_server.command("HGET", endpoint_key, "ack") == ""
    assert redis_server.command("GET", attempts_key) == "not a list"

    assert redis_server.command("DEL", attempts_key) == "1"
    attempts = wait_until(
        lambda: client.get(f"/webhooks/{hook['id']}/attempts", headers=AUTH).json["attempts"],
        what="the delivery recorded",
    )
    assert [(attempt["webhook_id"], attempt["status"]) for attempt in attempts] == [
        (receiver.deliveries[0].id, 204)
    ]
    assert redis_server.command("HGET", endpoint_key, "position") != before


def calls_of(redis_server, command: str) -> int:
    """How many times Redis ran `command` since its statistics were reset."""
    for line in redis_server.command("INFO", "commandstats").splitlines():
        if line.startswith(f"cmdstat_{command}:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def test_a_look_the_store_refuses_is_tried_again_after_a_growing_wait(make_app, tmp_path, receiver):
    # A Redis of its own: its statistics are reset.
    redis_server = RedisServer(tmp_path)
    store_settings = redis_settings(redis_server)
    app = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", **store_settings)
    try:
        look_refused(app, store_settings, redis_server, receiver)
    finally:
        plants_state(app).close()
        redis_server.stop()


def look_refused(app, store_settings, redis_server, receiver) -> None:
    client = app.test_client()
    client.post("/webhooks", json={"url": receiver.url}, headers=AUTH)
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH).status_code == 200
    wait_until(lambda: receiver.deliveries, what="the first delivery")
    ids_key = "{" + store_settings["PLANTS_STORE_PREFIX"] + ":hooks}:ids"
    # Another program's string where the endpoints' ids are kept: every look at them is refused.
    redis_server.command("DEL", ids_key)
    redis_server.command("SET", ids_key, "not a sorted set")
    assert client.post("/plants", json={"id": 2, "name": "Fern"}, headers=AUTH).status_code == 200
    redis_server.command("CONFIG", "RESETSTAT")
    time.sleep(3)
    # A look every 0.1 s would be 30; waits of 0.1, 0.2, 0.4, 0.8, 1.6 and 2 s are 6 or 7.
    assert calls_of(redis_server, "zrange") <= 12


def test_a_store_at_its_maxmemory_holds_deliveries_with_a_warning_not_a_traceback(make_app, tmp_path, caplog):
    """At Redis's maxmemory the drain cannot store its acknowledgement, nor a look its lease: that
    is the operator's full store (/readyz says so), not a fault of the deliverer's, so it is one
    WARNING saying so, never an ERROR with a traceback at each look. The event is sent again once
    Redis has room, and recorded then."""
    redis_server = RedisServer(tmp_path, "--maxmemory-policy", "noeviction")
    # The first delivery is answered a second late: Redis fills meanwhile.
    receiver = Receiver(lambda delivery, number: (204, {}, 1.0 if number == 1 else 0.0))
    try:
        app = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", **redis_settings(redis_server))
        client = app.test_client()
        hook = client.post("/webhooks", json={"url": receiver.url}, headers=AUTH).json
        assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH).status_code == 200
        with caplog.at_level("INFO", logger="app.webhooks"):
            receiver.wait_for(1)
            redis_server.command("CONFIG", "SET", "maxmemory", "1")
            time.sleep(2.5)  # the ack refused, the hold, and the next look's lease refused
            assert client.post("/plants", json={"id": 2, "name": "Fir"}, headers=AUTH).status_code == 507
            redis_server.command("CONFIG", "SET", "maxmemory", "0")
            attempts = wait_until(
                lambda: client.get(f"/webhooks/{hook['id']}/attempts", headers=AUTH).json["attempts"],
                # Not REFRESH_S (30 s): a look whose lease was refused reads the endpoints again.
                timeout=10,
                what="the delivery recorded",
            )
        assert {attempt["webhook_id"] for attempt in attempts} == {receiver.deliveries[0].id}
        records = [record for record in caplog.records if record.name.startswith("app.webhooks")]
        faults = [record for record in records if record.exc_info or record.levelname == "ERROR"]
        assert not [record.getMessage() for record in faults]
        assert any("maxmemory" in record.getMessage() for record in records if record.levelname == "WARNING")
    finally:
        plants_state(app).close()
        receiver.stop()
        redis_server.stop()


def test_a_webhook_change_at_redis_maxmemory_is_a_documented_507_about_the_endpoint(make_app, tmp_path):
    """At Redis's maxmemory each change to an endpoint is refused (a delete still answers): a 507
    that names what was refused, an endpoint's change, not "a new plant", and one the document
    lists for each operation, which it did for POST /webhooks only, for PLANTS_WEBHOOKS_MAX."""
    redis_server = RedisServer(tmp_path, "--maxmemory-policy", "noeviction")
    try:
        app = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", **redis_settings(redis_server))
        client = app.test_client()
        hook = client.post("/webhooks", json={"url": "http://127.0.0.1:9/hook"}, headers=AUTH).json
        document = client.get("/openapi.json").json["paths"]
        redis_server.command("CONFIG", "SET", "maxmemory", "1")
        patch = {**AUTH, "Content-Type": "application/merge-patch+json"}
        path = f"/webhooks/{hook['id']}"
        refused = {
            ("/webhooks", "post"): client.post(
                "/webhooks", json={"url": "http://127.0.0.1:9/b"}, headers=AUTH
            ),
            ("/webhooks/{endpoint_id}", "patch"): client.patch(
                path, json={"description": "b"}, headers=patch
            ),
            ("/webhooks/{endpoint_id}/rotate", "post"): client.post(f"{path}/rotate", headers=AUTH),
            ("/webhooks/{endpoint_id}/replay", "post"): client.post(
                f"{path}/replay", json={"after": "start"}, headers=AUTH
            ),
        }
        for (path, method), response in refused.items():
            assert (response.status_code, response.json["error"]) == (507, 507), (path, response.json)
            assert "webhook endpoint" in response.json["message"], (path, response.json)
            assert "maxmemory" in response.json["message"]
            assert "507" in document[path][method]["responses"], (path, method)
        assert client.delete(f"/webhooks/{hook['id']}", headers=AUTH).status_code == 204
    finally:
        plants_state(app).close()
        redis_server.stop()
