"""Changing a plant: PUT, PATCH, ETags and conditional requests, on every store."""

from __future__ import annotations

import threading

import pytest

from app.store import plant_etag
from tests.conftest import STORES_AND_CLUSTER, settings_for_store
from tests.contract.test_metrics import request_count, samples
from tests.helpers import error_of

MERGE_PATCH = "application/merge-patch+json"


@pytest.fixture(params=STORES_AND_CLUSTER)
def store_settings(request):
    return settings_for_store(request, request.param)


def quoted(name: str, tag: str | None = None) -> str:
    return f'"{plant_etag(name, tag)}"'


@pytest.fixture
def fern(client, auth):
    """Plant 5, {Fern, green}: its ETag."""
    response = client.post("/plants", json={"id": 5, "name": "Fern", "tag": "green"}, headers=auth)
    assert response.status_code == 200
    return response.headers["ETag"]


# --- ETags and the conditional GET ---------------------------------------------------------------


def test_every_answer_with_one_plant_carries_its_strong_etag(client, auth, fern):
    assert fern == quoted("Fern", "green")
    assert client.get("/plants/5", headers=auth).headers["ETag"] == fern
    # A replay of the create answers the same ETag; a conflict none.
    assert (
        client.post("/plants", json={"id": 5, "name": "Fern", "tag": "green"}, headers=auth).headers["ETag"]
        == fern
    )
    assert "ETag" not in client.post("/plants", json={"id": 5, "name": "Other"}, headers=auth).headers
    changed = client.put("/plants/5", json={"name": "Fern", "tag": "blue"}, headers=auth)
    assert changed.headers["ETag"] == quoted("Fern", "blue") != fern
    patched = client.patch("/plants/5", json={"name": "Big fern"}, headers=auth)
    assert patched.headers["ETag"] == quoted("Big fern", "blue")
    assert client.get("/plants/5", headers=auth).headers["ETag"] == patched.headers["ETag"]


@pytest.mark.parametrize(
    "header",
    ["{etag}", '"other", {etag}', "*", "W/{etag}", ' "x" ,  W/{etag} '],
    ids=["same", "in-a-list", "star", "weak", "spaces"],
)
def test_get_with_a_matching_if_none_match_is_304(client, auth, fern, header):
    response = client.get("/plants/5", headers={**auth, "If-None-Match": header.format(etag=fern)})
    assert response.status_code == 304
    assert response.get_data() == b""
    assert response.headers["ETag"] == fern
    assert "Content-Type" not in response.headers


def test_get_with_another_if_none_match_is_200(client, auth, fern):
    response = client.get("/plants/5", headers={**auth, "If-None-Match": '"0123456789abcdef", W/"x"'})
    assert response.status_code == 200
    assert response.get_json() == {"name": "Fern", "tag": "green"}


@pytest.mark.parametrize("header", ['"0123456789abcdef"', "W/{etag}", '"a", W/{etag}', "abc"])
def test_get_with_an_if_match_it_does_not_meet_is_412(client, auth, fern, header):
    """RFC 9110 §13.1.1: an origin server evaluates If-Match before any method, a GET too."""
    response = client.get("/plants/5", headers={**auth, "If-Match": header.format(etag=fern)})
    error_of(response, 412)
    assert "ETag" not in response.headers


@pytest.mark.parametrize("header", ["{etag}", '"other", {etag}', "*"])
def test_get_with_an_if_match_it_meets_answers_the_plant(client, auth, fern, header):
    response = client.get("/plants/5", headers={**auth, "If-Match": header.format(etag=fern)})
    assert response.status_code == 200
    assert response.get_json() == {"name": "Fern", "tag": "green"}
    # If-Match is checked first; a matching If-None-Match after it is still a 304.
    both = {**auth, "If-Match": fern, "If-None-Match": fern}
    assert client.get("/plants/5", headers=both).status_code == 304
    # Of an absent plant, a 404 whatever the precondition (RFC 9110 §13.2.1).
    assert client.get("/plants/6", headers={**auth, "If-Match": "*"}).status_code == 404


@pytest.mark.parametrize("value", ["0", "abc", '"unterminated', "W/", '"a" "b"', "**", '"a",*'])
def test_a_conditional_header_that_names_no_entity_tag_matches_nothing(client, auth, fern, value):
    """Read leniently (as most servers do), never refused: If-Match fails, If-None-Match passes."""
    assert client.get("/plants/5", headers={**auth, "If-None-Match": value}).status_code == 200
    response = client.put("/plants/5", json={"name": "X"}, headers={**auth, "If-Match": value})
    error_of(response, 412)
    assert client.get("/plants/5", headers=auth).get_json() == {"name": "Fern", "tag": "green"}
    response = client.put("/plants/5", json={"name": "X"}, headers={**auth, "If-None-Match": value})
    assert response.status_code == 200
    # Beside a real tag, the member that names nothing changes nothing.
    assert (
        client.delete("/plants/5", headers={**auth, "If-Match": f"{value}, {quoted('X')}"}).status_code == 204
    )


# --- PUT --------------------------------------------------------------------------------------------


def test_put_replaces_and_a_missing_tag_removes_it(client, auth, fern):
    response = client.put("/plants/5", json={"name": "Fern"}, headers=auth)
    assert (response.status_code, response.get_json()) == (200, {"name": "Fern"})
    assert client.get("/plants/5", headers=auth).get_json() == {"name": "Fern"}


def test_put_of_the_same_plant_writes_nothing_and_keeps_the_etag(client, auth, fern):
    response = client.put("/plants/5", json={"id": 5, "name": "Fern", "tag": "green"}, headers=auth)
    assert (response.status_code, response.headers["ETag"]) == (200, fern)


def test_put_creates_an_absent_plant_with_201_and_location(client, auth, store):
    response = client.put("/plants/77", json={"name": "Aloe", "tag": "succulent"}, headers=auth)
    assert response.status_code == 201
    assert response.get_json() == {"name": "Aloe", "tag": "succulent"}
    assert response.headers["Location"] == "http://localhost/plants/77"
    assert response.headers["ETag"] == quoted("Aloe", "succulent")
    assert len(store) == 1
    assert client.get("/plants/77", headers=auth).get_json() == {"name": "Aloe", "tag": "succulent"}


def test_put_creating_counts_under_the_capacity(make_app, auth):
    client = make_app(PLANTS_MAX_PLANTS=1).test_client()
    # Ids 0 and 24 share a cluster's first bucket group, which holds the one place.
    assert client.put("/plants/0", json={"name": "A"}, headers=auth).status_code == 201
    error_of(client.put("/plants/24", json={"name": "B"}, headers=auth), 507)
    # A replace of a stored plant needs no room.
    assert client.put("/plants/0", json={"name": "C"}, headers=auth).status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"id": 6, "name": "Fern"}, "id"),
        ({"id": "5", "name": "Fern"}, "id"),
        ({"name": "Fern", "tags": "x"}, "tags"),
        ({"tag": "x"}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x" * 201}, "name"),
        ({"name": "Fern", "tag": None}, "tag"),
        ({"name": "Fern", "tag": "t" * 101}, "tag"),
    ],
)
def test_put_refuses_an_invalid_plant_naming_the_field(client, auth, fern, body, field):
    assert field in error_of(client.put("/plants/5", json=body, headers=auth), 400)["details"]
    assert client.get("/plants/5", headers=auth).headers["ETag"] == fern


# --- PATCH ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("patch", "after"),
    [
        ({"name": "Big fern"}, {"name": "Big fern", "tag": "green"}),
        ({"tag": "blue"}, {"name": "Fern", "tag": "blue"}),
        ({"tag": None}, {"name": "Fern"}),
        ({}, {"name": "Fern", "tag": "green"}),
        ({"id": 5, "name": "N", "tag": "t"}, {"name": "N", "tag": "t"}),
    ],
    ids=["name", "tag", "remove-tag", "empty", "all"],
)
@pytest.mark.parametrize("content_type", [MERGE_PATCH, "application/json"])
def test_patch_merges(client, auth, fern, patch, after, content_type):
    import json

    response = client.patch(
        "/plants/5", data=json.dumps(patch), headers={**auth, "Content-Type": content_type}
    )
    assert (response.status_code, response.get_json()) == (200, after)
    assert response.headers["ETag"] == quoted(after["name"], after.get("tag"))
    assert client.get("/plants/5", headers=auth).get_json() == after


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"name": None}, "name"),
        ({"name": ""}, "name"),
        ({"tag": ""}, "tag"),
        ({"id": 4}, "id"),
        ({"color": "red"}, "color"),
    ],
)
def test_patch_refuses_naming_the_field(client, auth, fern, patch, field):
    assert field in error_of(client.patch("/plants/5", json=patch, headers=auth), 400)["details"]
    assert client.get("/plants/5", headers=auth).headers["ETag"] == fern


def test_patch_of_an_absent_plant_is_404(client, auth, store):
    error_of(client.patch("/plants/8", json={"name": "X"}, headers=auth), 404)
    error_of(client.patch("/plants/8", json={"name": "X"}, headers={**auth, "If-Match": "*"}), 404)
    assert len(store) == 0


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/json-patch+json", "application/json; charset=latin-1"]
)
def test_patch_of_another_type_is_415_with_accept_patch(client, auth, fern, content_type):
    response = client.patch("/plants/5", data="{}", headers={**auth, "Content-Type": content_type})
    error_of(response, 415)
    assert response.headers["Accept-Patch"] == MERGE_PATCH


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_change_in_a_content_coding_is_415_and_changes_nothing(client, auth, fern, method):
    headers = {**auth, "Content-Type": "application/json", "Content-Encoding": "deflate"}
    response = client.open("/plants/5", method=method, data=b'{"name": "Changed"}', headers=headers)
    assert "'deflate'" in error_of(response, 415)["message"]
    assert response.headers["Accept-Encoding"] == "identity"
    if method == "PATCH":
        assert response.headers["Accept-Patch"] == MERGE_PATCH
    assert client.get("/plants/5", headers=auth).headers["ETag"] == fern


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=latin-1", f"{MERGE_PATCH}; charset=utf-16"]
)
def test_a_patch_of_an_accepted_type_in_another_charset_is_told_the_charset(client, auth, fern, content_type):
    # The type is one a patch may have: telling the client to send it would not help.
    response = client.patch("/plants/5", data="{}", headers={**auth, "Content-Type": content_type})
    assert error_of(response, 415)["message"] == "JSON must be encoded as UTF-8."
    assert response.headers["Accept-Patch"] == MERGE_PATCH


# --- Preconditions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_if_match_lets_the_current_version_change_only(client, auth, fern, method):
    body = {"name": "Changed"} if method != "DELETE" else None
    stale = '"0123456789abcdef"'
    error_of(client.open("/plants/5", method=method, json=body, headers={**auth, "If-Match": stale}), 412)
    error_of(
        client.open("/plants/5", method=method, json=body, headers={**auth, "If-Match": f"W/{fern}"}), 412
    )
    assert client.get("/plants/5", headers=auth).headers["ETag"] == fern  # nothing changed
    response = client.open(
        "/plants/5", method=method, json=body, headers={**auth, "If-Match": f"{stale}, {fern}"}
    )
    assert response.status_code == (204 if method == "DELETE" else 200)


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_if_match_star_needs_the_plant(client, auth, method, store):
    body = {"name": "New"} if method != "DELETE" else None
    response = client.open("/plants/6", method=method, json=body, headers={**auth, "If-Match": "*"})
    error_of(response, 412 if method == "PUT" else 404)  # PATCH and DELETE of nothing stay 404
    assert len(store) == 0


@pytest.mark.parametrize("header", ['"*"', 'W/"*"'])
@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_a_quoted_star_is_an_entity_tag_not_the_wildcard(client, auth, fern, method, header):
    """RFC 9110 §13.1.1: only an unquoted `*` is the wildcard; `"*"` is a tag no plant has."""
    body = {"name": "New"} if method != "DELETE" else None
    error_of(client.open("/plants/5", method=method, json=body, headers={**auth, "If-Match": header}), 412)
    assert client.get("/plants/5", headers=auth).headers["ETag"] == fern
    response = client.open("/plants/5", method=method, json=body, headers={**auth, "If-None-Match": header})
    assert response.status_code == (204 if method == "DELETE" else 200)
    assert client.get("/plants/5", headers={**auth, "If-None-Match": header}).status_code in (200, 404)


def test_put_if_none_match_star_creates_only(client, auth, fern):
    error_of(client.put("/plants/5", json={"name": "X"}, headers={**auth, "If-None-Match": "*"}), 412)
    assert client.get("/plants/5", headers=auth).headers["ETag"] == fern
    assert (
        client.put("/plants/6", json={"name": "X"}, headers={**auth, "If-None-Match": "*"}).status_code == 201
    )


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_require_if_match_answers_428_without_a_precondition(make_app, auth, method):
    client = make_app(PLANTS_REQUIRE_IF_MATCH=True).test_client()
    etag = client.post("/plants", json={"id": 5, "name": "Fern"}, headers=auth).headers["ETag"]
    body = {"name": "Changed"} if method != "DELETE" else None
    error_of(client.open("/plants/5", method=method, json=body, headers=auth), 428)
    assert client.get("/plants/5", headers=auth).get_json() == {"name": "Fern"}
    response = client.open("/plants/5", method=method, json=body, headers={**auth, "If-Match": etag})
    assert response.status_code in (200, 204)


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_read_only_token_is_403_before_the_body_is_read(make_app, auth, method):
    client = make_app(PLANTS_READ_TOKENS="reader").test_client()
    client.post("/plants", json={"id": 5, "name": "Fern"}, headers=auth)
    response = client.open(
        "/plants/5", method=method, data=b"not json", headers={"Authorization": "Bearer reader"}
    )
    error_of(response, 403)
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="plants", error="insufficient_scope"'


def test_allow_lists_the_new_methods(client):
    response = client.post("/plants/5")
    error_of(response, 405)
    assert response.headers["Allow"] == "GET, HEAD, PUT, PATCH, DELETE, OPTIONS"


# --- Indexes and races ----------------------------------------------------------------------------


def test_a_change_of_tag_moves_the_plant_between_tag_pages(client, auth, fern):
    client.post("/plants", json={"id": 6, "name": "Moss", "tag": "green"}, headers=auth)
    client.patch("/plants/5", json={"tag": "blue"}, headers=auth)

    def ids(tag):
        return [plant["id"] for plant in client.get(f"/plants?tags={tag}", headers=auth).get_json()["plants"]]

    assert (ids("green"), ids("blue")) == ([6], [5])
    client.put("/plants/5", json={"name": "Fern"}, headers=auth)  # no tag: in no tag's pages
    assert (ids("green"), ids("blue")) == ([6], [])
    client.patch("/plants/6", json={"tag": None}, headers=auth)
    assert ids("green") == []
    assert [plant["id"] for plant in client.get("/plants", headers=auth).get_json()["plants"]] == [5, 6]


def test_lost_update_exactly_one_of_concurrent_conditional_puts_wins(app, auth, fern):
    results: dict[int, int] = {}

    def put(number: int) -> None:
        client = app.test_client()
        response = client.put(
            "/plants/5", json={"name": f"Writer {number}"}, headers={**auth, "If-Match": fern}
        )
        results[number] = response.status_code

    threads = [threading.Thread(target=put, args=(number,)) for number in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [number for number, status in results.items() if status == 200]
    assert len(winners) == 1
    assert sorted(results.values()) == [200] + [412] * 15
    assert app.test_client().get("/plants/5", headers=auth).get_json() == {"name": f"Writer {winners[0]}"}


def test_changes_are_counted_by_rate_limits_and_labelled_in_metrics(make_app, auth):
    client = make_app(PLANTS_RATE_LIMIT="3/minute").test_client()
    assert client.put("/plants/0", json={"name": "A"}, headers=auth).status_code == 201
    assert client.patch("/plants/0", json={"tag": "t"}, headers=auth).status_code == 200
    assert client.put("/plants/0", json={"name": "B"}, headers=auth).status_code == 200
    error_of(client.patch("/plants/0", json={"name": "C"}, headers=auth), 429)
    # A scraper's own token: /metrics counts against its token's limit as every operation does.
    scraper = {"Authorization": "Bearer second-token"}
    scrape = samples(client.get("/metrics", headers=scraper).get_data(as_text=True))
    for method, status, count in (
        ("PUT", "201", 1),
        ("PUT", "200", 1),
        ("PATCH", "200", 1),
        ("PATCH", "429", 1),
    ):
        assert request_count(scrape, "/plants/<plant_id>", method, status) == count


def test_the_empty_entity_tag_never_matches(client, auth, fern):
    # `""` is a valid entity-tag that no plant has (Werkzeug reads it as None).
    error_of(client.put("/plants/5", json={"name": "X"}, headers={**auth, "If-Match": '"", W/"x"'}), 412)
    error_of(client.delete("/plants/5", headers={**auth, "If-Match": '""'}), 412)
    assert client.get("/plants/5", headers={**auth, "If-None-Match": '""'}).status_code == 200
    assert (
        client.put("/plants/5", json={"name": "X"}, headers={**auth, "If-None-Match": '""'}).status_code
        == 200
    )
