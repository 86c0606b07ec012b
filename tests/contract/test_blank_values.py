"""A plant's name and tag need a character other than white space, on every write that sets them."""

from __future__ import annotations

import pytest

from tests.helpers import error_of

BLANKS = [" ", "   ", "\t", "\n", " \u00a0\u3000 "]
BLANK_MESSAGE = "Must have a character other than white space."


@pytest.fixture
def fern(client, auth, store):
    """Plant 5, {Fern, green}."""
    response = client.post("/plants", json={"id": 5, "name": "Fern", "tag": "green"}, headers=auth)
    assert response.status_code == 200
    return store.get(5)


def writes(client, auth, field, value):
    """Every write that sets `field` to `value` on plant 5 (PUT and PATCH) or creates plant 6."""
    other = {"name": "Fern"} if field == "tag" else {"tag": "green"}
    return {
        "POST": client.post("/plants", json={"id": 6, **other, field: value}, headers=auth),
        "PUT": client.put("/plants/5", json={**other, field: value}, headers=auth),
        "PUT creating": client.put("/plants/7", json={**other, field: value}, headers=auth),
        "PATCH": client.patch("/plants/5", json={field: value}, headers=auth),
    }


@pytest.mark.parametrize("field", ["name", "tag"])
@pytest.mark.parametrize("value", BLANKS, ids=repr)
def test_a_name_or_tag_of_only_white_space_is_400_on_every_write(client, auth, store, fern, field, value):
    for operation, response in writes(client, auth, field, value).items():
        record = error_of(response, 400)
        assert record["details"] == {field: [BLANK_MESSAGE]}, operation
        assert field in record["message"], operation
    assert store.get(5) == fern
    assert store.get(6) is None
    assert store.get(7) is None


@pytest.mark.parametrize("field", ["name", "tag"])
def test_white_space_around_a_name_or_tag_is_kept_as_written(client, auth, store, fern, field):
    value = "  Big fern "
    for operation, response in writes(client, auth, field, value).items():
        assert response.status_code in (200, 201), operation
        assert response.get_json()[field] == value, operation
    assert getattr(store.get(6), field) == value


def test_a_long_blank_name_is_told_both_of_its_faults(client, auth, store):
    record = error_of(client.post("/plants", json={"id": 1, "name": " " * 201}, headers=auth), 400)
    assert record["details"]["name"] == ["Length must be between 1 and 200.", BLANK_MESSAGE]
    assert store.get(1) is None


def test_a_stored_plant_is_named_as_it_was_stored(store, client, auth):
    # A plant stored before the rule (an older version's store) still reads and lists as it is.
    store.create(3, " ", " ")
    assert client.get("/plants/3", headers=auth).get_json() == {"name": " ", "tag": " "}
