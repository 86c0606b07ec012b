"""GET /plants/{id}, DELETE /plants/{id} and read-only tokens: every status, on both stores."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.store import Plant
from app.store.redis.groups import CLUSTER_GROUPS
from tests.conftest import STORES_AND_CLUSTER, settings_for_store
from tests.helpers import error_of

READER = "reader-token"
READ = {"Authorization": f"Bearer {READER}"}
SCOPE_CHALLENGE = 'Bearer realm="plants", error="insufficient_scope"'
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


@pytest.fixture(params=STORES_AND_CLUSTER)
def store_settings(request):
    """This module's tests run on the cluster too."""
    return settings_for_store(request, request.param)


@pytest.fixture
def app(make_app):
    return make_app(PLANTS_READ_TOKENS=READER)


@pytest.mark.parametrize(
    ("plant_id", "name", "tag", "body"),
    [
        (1, "Boston fern", "fern", {"name": "Boston fern", "tag": "fern"}),
        (2, "Cactus", None, {"name": "Cactus"}),
        (-7, "Negative", "t", {"name": "Negative", "tag": "t"}),
        (INT64_MAX, "Max", None, {"name": "Max"}),
        (INT64_MIN, "Min", None, {"name": "Min"}),
        (0, "Ünïcödé 🌵", "多肉植物", {"name": "Ünïcödé 🌵", "tag": "多肉植物"}),
    ],
)
@pytest.mark.parametrize("headers", ["full", "read-only"])
def test_get_answers_the_plant_as_the_create_did(client, auth, plant_id, name, tag, body, headers):
    created = client.post("/plants", json={"id": plant_id, **body}, headers=auth)
    assert created.status_code == 200
    response = client.get(f"/plants/{plant_id}", headers=auth if headers == "full" else READ)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.json == body
    assert response.get_data() == created.get_data()


def test_get_of_an_absent_id_is_404(client, auth):
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
    record = error_of(client.get("/plants/2", headers=auth), 404)
    assert record["message"] == "There is no plant with id 2."


@pytest.mark.parametrize(
    "text",
    ["abc", "1.5", "1e-3", "+1", " 1", "1_000", "0x10", "007", "-", "--1", "1.", ".5", "1e", "NaN",
     "Infinity", "9223372036854775808", "-9223372036854775809", "9.3e18", "1e999999999", "1" * 60,
     "1" * 200, "%E2%82%AC", "\uff11"],
)  # fmt: skip
@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_an_id_that_is_not_a_decimal_int64_is_400_naming_id(client, auth, store, method, text):
    store.create(1, "Fern", None)
    record = error_of(client.open(f"/plants/{text}", method=method, headers=auth), 400)
    assert set(record["details"]) == {"id"}
    assert "id" in record["message"]
    assert store.get(1) == Plant("Fern")


@pytest.mark.parametrize(
    ("text", "plant_id"),
    [("700", 700), ("7e2", 700), ("700.0", 700), ("0.7E+3", 700), ("-0", 0), ("0.0", 0),
     ("-9.223372036854775808e18", INT64_MIN), ("9223372036854775807.0", INT64_MAX)],
)  # fmt: skip
def test_an_integral_json_number_names_the_plant_as_in_a_create(client, auth, store, text, plant_id):
    """The path's id is read as a NewPlant's id is: exactly, whatever the JSON notation."""
    store.create(plant_id, "Fern", None)
    assert client.get(f"/plants/{text}", headers=auth).json == {"name": "Fern"}
    assert client.delete(f"/plants/{text}", headers=auth).status_code == 204
    assert store.get(plant_id) is None


def test_delete_is_204_without_a_body_then_the_plant_is_gone(client, auth, store):
    client.post("/plants", json={"id": 5, "name": "Fern", "tag": "fern"}, headers=auth)
    client.post("/plants", json={"id": 6, "name": "Palm"}, headers=auth)
    response = client.delete("/plants/5", headers=auth)
    assert response.status_code == 204
    assert response.get_data() == b""
    assert "Content-Type" not in response.headers
    assert store.get(5) is None
    assert len(store) == 1
    error_of(client.get("/plants/5", headers=auth), 404)
    error_of(client.delete("/plants/5", headers=auth), 404)
    assert client.get("/plants", headers=auth).json == {"plants": [{"id": 6, "name": "Palm"}]}
    assert client.get("/plants?tags=fern", headers=auth).json == {"plants": []}


def test_a_create_of_a_deleted_id_is_a_new_plant(client, auth, store):
    client.post("/plants", json={"id": 5, "name": "Fern", "tag": "fern"}, headers=auth)
    assert client.delete("/plants/5", headers=auth).status_code == 204
    again = client.post("/plants", json={"id": 5, "name": "Cactus"}, headers=auth)
    assert (again.status_code, again.json) == (200, {"name": "Cactus"})
    assert store.get(5) == Plant("Cactus")
    assert client.get("/plants", headers=auth).json == {"plants": [{"id": 5, "name": "Cactus"}]}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("POST", "/plants", {"id": 9, "name": "Fern"}), ("DELETE", "/plants/1", None)],
)
def test_a_read_only_token_that_writes_is_403_insufficient_scope(client, store, method, path, body):
    store.create(1, "Fern", None)
    response = client.open(path, method=method, json=body, headers=READ)
    record = error_of(response, 403)
    assert response.headers["WWW-Authenticate"] == SCOPE_CHALLENGE
    assert READER not in record["message"]
    assert store.get(1) == Plant("Fern")
    assert store.get(9) is None
    assert len(store) == 1


def test_a_read_only_token_is_refused_before_the_body_is_read(client, store):
    response = client.post("/plants", data=b"{" * 70_000, content_type="text/plain", headers=READ)
    error_of(response, 403)


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/plants"), ("GET", "/plants/1"), ("DELETE", "/plants/1")]
)
@pytest.mark.parametrize(
    ("headers", "challenge"),
    [
        ({}, 'Bearer realm="plants"'),
        ({"Authorization": "Bearer wrong-token"}, 'Bearer realm="plants", error="invalid_token"'),
    ],
)
def test_every_operation_needs_a_token(client, store, method, path, headers, challenge):
    store.create(1, "Fern", None)
    response = client.open(path, method=method, headers=headers)
    error_of(response, 401)
    assert response.headers["WWW-Authenticate"] == challenge
    assert store.get(1) == Plant("Fern")


def test_a_full_store_takes_exactly_one_new_plant_after_one_delete(make_app, store_settings, auth):
    """Exact at the store's capacity; on a cluster, exact at each group's share of it (README:
    capacity on a cluster), so there every id below is one group's and the capacity is 5 per group."""
    groups = CLUSTER_GROUPS if "cluster" in store_settings.get("PLANTS_STORE_URL", "") else 1
    app = make_app(PLANTS_MAX_PLANTS=5 * groups)
    client, store = app.test_client(), app.extensions["plants"].store
    ids = [n * groups for n in range(20)]  # with 24 groups, ids 0, 24, 48...: all in group 0
    for plant_id in ids[:5]:
        assert client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=auth).status_code == 200
    error_of(client.post("/plants", json={"id": ids[10], "name": "Fern"}, headers=auth), 507)
    assert client.delete(f"/plants/{ids[3]}", headers=auth).status_code == 204
    barrier = threading.Barrier(8)

    def contender(plant_id: int) -> int:
        barrier.wait()
        return client.post("/plants", json={"id": plant_id, "name": "New"}, headers=auth).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = Counter(pool.map(contender, ids[10:18]))
    assert statuses == {200: 1, 507: 7}
    assert len(store) == 5
    assert len(client.get("/plants", headers=auth).json["plants"]) == 5


def test_reads_count_against_the_tokens_rate_limit(make_app, auth):
    client = make_app(PLANTS_READ_TOKENS=READER, PLANTS_RATE_LIMIT="3 per 30 seconds").test_client()
    answers = [
        client.get("/plants", headers=READ),
        client.get("/plants/1", headers=READ),
        client.delete("/plants/1", headers=READ),  # a refused write is a request of the token too
        client.get("/plants", headers=READ),
    ]
    assert [answer.status_code for answer in answers] == [200, 404, 403, 429]
    assert [answer.headers["RateLimit-Remaining"] for answer in answers] == ["2", "1", "0", "0"]
    assert answers[3].headers["Retry-After"]
    # Each token has its own window: the full-access token is untouched.
    assert client.get("/plants", headers=auth).headers["RateLimit-Remaining"] == "2"
