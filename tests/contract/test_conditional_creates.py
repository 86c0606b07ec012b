"""Preconditions on the POSTs that make something (RFC 9110 §13.1.1-2): `POST /plants` judges
If-Match and If-None-Match against the plant stored with the id it names, `POST /events/tickets`
against nothing (a ticket has no current representation). Each refusal is a 412 that changed nothing."""

from __future__ import annotations

import pytest

from app.store import plant_etag
from tests.conftest import STORES_AND_CLUSTER, settings_for_store
from tests.helpers import error_of

FERN = {"id": 5, "name": "Fern", "tag": "green"}
FERN_ETAG = f'"{plant_etag("Fern", "green")}"'


@pytest.fixture(params=STORES_AND_CLUSTER)
def store_settings(request):
    return settings_for_store(request, request.param)


def post(client, auth, header: str, value: str, body=FERN):
    return client.post("/plants", json=body, headers={**auth, header: value})


def test_if_none_match_star_creates_an_absent_plant(client, auth, store):
    response = post(client, auth, "If-None-Match", "*")
    assert response.status_code == 200
    assert response.headers["ETag"] == FERN_ETAG
    assert len(store) == 1


@pytest.mark.parametrize("body", [FERN, {**FERN, "name": "Palm"}], ids=["identical", "different"])
def test_if_none_match_star_refuses_a_create_of_a_stored_id(client, auth, body):
    """Without it an identical retry answers 200 and a different plant 409; with it the client
    asked for a create only if there is none: 412 either way, and the stored plant is kept."""
    assert client.post("/plants", json=FERN, headers=auth).status_code == 200
    answer = error_of(post(client, auth, "If-None-Match", "*", body), 412)
    assert "with id 5" in answer["message"]
    assert client.get("/plants/5", headers=auth).headers["ETag"] == FERN_ETAG


def test_if_none_match_with_entity_tags_is_judged_against_the_stored_plant(client, auth):
    assert client.post("/plants", json=FERN, headers=auth).status_code == 200
    error_of(post(client, auth, "If-None-Match", f'"0123456789abcdef", {FERN_ETAG}'), 412)
    assert post(client, auth, "If-None-Match", '"0123456789abcdef"').status_code == 200  # a retry


@pytest.mark.parametrize("value", ["*", FERN_ETAG, '"0123456789abcdef"'])
def test_if_match_on_a_create_of_an_absent_id_is_412_and_creates_nothing(client, auth, store, value):
    answer = error_of(post(client, auth, "If-Match", value), 412)
    assert "nothing was created" in answer["message"]
    assert len(store) == 0
    error_of(client.get("/plants/5", headers=auth), 404)
    assert client.get("/events", headers=auth).json["events"] == []


def test_if_match_on_a_stored_id_answers_as_a_create_of_it_once_it_holds(client, auth):
    """It holds: an identical create answers 200 (a retry), a different one 409; it fails: 412."""
    assert client.post("/plants", json=FERN, headers=auth).status_code == 200
    for value in ("*", FERN_ETAG):
        assert post(client, auth, "If-Match", value).status_code == 200
        error_of(post(client, auth, "If-Match", value, {**FERN, "name": "Palm"}), 409)
    error_of(post(client, auth, "If-Match", '"0123456789abcdef"'), 412)
    error_of(post(client, auth, "If-Match", f"W/{FERN_ETAG}"), 412)  # never a weak match
    assert client.get("/plants/5", headers=auth).json["name"] == "Fern"
    assert len(client.get("/events", headers=auth).json["events"]) == 1  # the first create's


def test_an_invalid_plant_is_400_before_its_precondition(client, auth):
    error_of(post(client, auth, "If-Match", "*", {"id": 5}), 400)


@pytest.mark.parametrize("value", ["*", '"0123456789abcdef"', 'W/"x"'])
def test_a_ticket_mint_under_if_match_is_412(client, auth, value):
    """A ticket has no current representation to match (each mint makes a new one)."""
    response = client.post("/events/tickets", headers={**auth, "If-Match": value})
    assert "ticket" not in error_of(response, 412)


@pytest.mark.parametrize("value", ["*", '"0123456789abcdef"'])
def test_a_ticket_mint_under_if_none_match_mints(client, auth, value):
    response = client.post("/events/tickets", headers={**auth, "If-None-Match": value})
    assert response.status_code == 200
    assert response.json["ticket"].startswith("plwt_")


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("*", "A plant with id 5 is stored, and 'If-None-Match: *' holds only where none is"),
        (FERN_ETAG, "The plant with id 5 has an ETag that If-None-Match lists"),
    ],
    ids=["star", "its-etag"],
)
def test_if_none_match_refused_by_a_stored_plant_says_so_not_that_it_changed(
    client, auth, store, method, value, says
):
    """`If-None-Match: *` (create only) of a stored id was told the plant `was changed, created or
    deleted since you read it` and to read its current ETag: advice for a failed If-Match. The
    client that sent only If-None-Match is told what failed, and nothing changed."""
    assert client.post("/plants", json=FERN, headers=auth).status_code == 200
    body = {"POST": FERN, "PUT": {"name": "Palm"}, "PATCH": {"name": "Palm"}, "DELETE": None}[method]
    path = "/plants" if method == "POST" else "/plants/5"
    answer = error_of(
        client.open(path, method=method, json=body, headers={**auth, "If-None-Match": value}), 412
    )
    assert answer["message"].startswith(says)
    assert "since you read it" not in answer["message"]
    assert client.get("/plants/5", headers=auth).headers["ETag"] == FERN_ETAG
