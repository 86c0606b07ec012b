"""The webhook endpoints' lag in /metrics: read from the store at each scrape, so that a deleted
endpoint's series is gone at the next scrape in every worker, and /metrics does not grow with
endpoints come and gone; each endpoint's series only for callers that may manage webhooks. In
process on the memory store and a real Redis, and through a real gunicorn with two workers."""

from __future__ import annotations

import json

import pytest

from tests.conftest import STORES, redis_settings, settings_for_store
from tests.contract.test_metrics import samples
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}"}
READER = {"Authorization": "Bearer reader-token"}
HOOK = "http://127.0.0.1:9/hook"
LAG = "plants_webhook_lag_events"


@pytest.fixture(params=STORES)
def store_settings(request):
    return settings_for_store(request, request.param)


@pytest.fixture
def client(make_app):
    return make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1",
        PLANTS_WEBHOOKS_DELIVER=False,
        PLANTS_READ_TOKENS="reader-token",
    ).test_client()


def lag_series(text: str) -> dict[tuple, float]:
    return {key: value for key, value in samples(text).items() if key[0] == LAG}


def series(text: str) -> set[tuple]:
    """Every series of a scrape, without its value (the request counters' values move)."""
    return set(samples(text))


def test_500_endpoints_created_and_deleted_leave_metrics_as_they_began(client):
    # One endpoint and one scrape first, so that the request counters' labels for these routes
    # exist already.
    first = client.post("/webhooks", json={"url": HOOK}, headers=AUTH).json["id"]
    client.get("/metrics", headers=AUTH)
    assert client.delete(f"/webhooks/{first}", headers=AUTH).status_code == 204
    before = client.get("/metrics", headers=AUTH).get_data(as_text=True)
    for number in range(500):
        endpoint_id = client.post("/webhooks", json={"url": HOOK}, headers=AUTH).json["id"]
        if number % 100 == 0:
            during = lag_series(client.get("/metrics", headers=AUTH).get_data(as_text=True))
            assert during == {(LAG, (("endpoint", endpoint_id),)): 0.0}
        assert client.delete(f"/webhooks/{endpoint_id}", headers=AUTH).status_code == 204
    after = client.get("/metrics", headers=AUTH).get_data(as_text=True)
    assert lag_series(after) == {}
    assert series(after) == series(before)
    assert abs(len(after) - len(before)) < 200  # the counters' digits, not 500 series


def test_the_lag_counts_the_events_each_endpoint_has_yet_to_be_sent(client):
    hook = client.post("/webhooks", json={"url": HOOK}, headers=AUTH).json
    for plant_id in range(3):
        client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=AUTH)
    scrape = samples(client.get("/metrics", headers=AUTH).get_data(as_text=True))
    assert scrape[(LAG, (("endpoint", hook["id"]),))] == 3.0
    assert scrape[("plants_webhook_max_lag_events", ())] == 3.0


def test_a_read_only_token_sees_the_largest_lag_but_no_endpoint_id(client):
    hook = client.post("/webhooks", json={"url": HOOK}, headers=AUTH).json
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH)
    text = client.get("/metrics", headers=READER).get_data(as_text=True)
    assert hook["id"] not in text
    assert lag_series(text) == {}
    assert samples(text)[("plants_webhook_max_lag_events", ())] == 1.0
    assert hook["id"] in client.get("/metrics", headers=AUTH).get_data(as_text=True)


@pytest.fixture
def two_workers(redis_server):
    server = Gunicorn(
        env={
            **redis_settings(redis_server),
            "WEB_CONCURRENCY": "2",
            "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1",
        }
    )
    yield server
    server.stop()


def request(server: Gunicorn, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    connection = server.connection()
    try:
        headers = {**AUTH, "Connection": "close"}
        payload = None
        if body is not None:
            payload = json.dumps(body)
            headers["Content-Type"] = "application/json"
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_across_two_gunicorn_workers_a_deleted_endpoint_leaves_no_series(two_workers):
    """Each scrape is answered by either worker; both read the store, neither keeps a file of it."""
    ids = []
    for _ in range(500):
        status, body = request(two_workers, "POST", "/webhooks", {"url": HOOK})
        assert status == 201, body
        ids.append(json.loads(body)["id"])
        if len(ids) == 40:
            for _scrape in range(4):
                text = request(two_workers, "GET", "/metrics")[1].decode()
                assert len(lag_series(text)) == 40
            for endpoint_id in ids:
                assert request(two_workers, "DELETE", f"/webhooks/{endpoint_id}")[0] == 204
            ids.clear()
    for endpoint_id in ids:
        assert request(two_workers, "DELETE", f"/webhooks/{endpoint_id}")[0] == 204
    for _scrape in range(6):
        text = request(two_workers, "GET", "/metrics")[1].decode()
        assert lag_series(text) == {}
        assert "wh_" not in text
