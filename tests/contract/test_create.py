"""POST /plants once authenticated: every row of the create table, through the test client."""

from __future__ import annotations

import gzip
import json

import pytest

from app.store import Plant
from tests.helpers import error_of

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def post(client, auth, body, content_type="application/json"):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post("/plants", data=data, content_type=content_type, headers=auth)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"id": 1, "name": "Fern", "tag": "fern"}, {"name": "Fern", "tag": "fern"}),
        ({"id": 2, "name": "Fern"}, {"name": "Fern"}),
        ({"id": INT64_MAX, "name": "Max"}, {"name": "Max"}),
        ({"id": INT64_MIN, "name": "Min"}, {"name": "Min"}),
        ({"id": 0, "name": "Ünïcödé 🌵", "tag": "多肉植物"}, {"name": "Ünïcödé 🌵", "tag": "多肉植物"}),
    ],
)
def test_valid_new_plant_is_200_with_exactly_the_plant(client, auth, store, body, expected):
    response = post(client, auth, body)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.json == expected  # exactly {name, tag}: no id, tag omitted rather than null
    assert store.get(body["id"]) == Plant(body["name"], body.get("tag"))


@pytest.mark.parametrize(
    ("literal", "stored"),
    [
        ("17788.0", 17788),
        ("1e2", 100),
        ("1E+2", 100),
        ("-0.0", 0),
        ("2.50e1", 25),
        # Above 2**53: a float would round this to ...992.
        ("9007199254740993.0", 9007199254740993),
        ("9223372036854775807.0", INT64_MAX),
        ("-9.223372036854775808e18", INT64_MIN),
    ],
)
def test_integral_number_is_that_integer_exactly(client, auth, store, literal, stored):
    # JSON has one number type and JSON Schema's integer is decided by value (RFC 8259 section 6).
    response = post(client, auth, f'{{"id": {literal}, "name": "Fern"}}')
    assert response.status_code == 200, response.json
    assert response.json == {"name": "Fern"}
    assert store.get(stored) == Plant("Fern")
    assert len(store) == 1


def test_identical_retry_is_200_and_changes_nothing(client, auth, store):
    body = {"id": 7, "name": "Fern", "tag": "fern"}
    first = post(client, auth, body)
    again = post(client, auth, body)
    assert first.status_code == again.status_code == 200
    assert first.get_data() == again.get_data()
    assert len(store) == 1
    assert store.get(7) == Plant("Fern", "fern")


@pytest.mark.parametrize(
    "other",
    [
        {"id": 7, "name": "Cactus", "tag": "fern"},
        {"id": 7, "name": "Fern", "tag": "cactus"},
        {"id": 7, "name": "Fern"},
    ],
    ids=["other-name", "other-tag", "tag-dropped"],
)
def test_same_id_with_other_data_is_409_and_keeps_the_first(client, auth, store, other):
    assert post(client, auth, {"id": 7, "name": "Fern", "tag": "fern"}).status_code == 200
    error_of(post(client, auth, other), 409)
    assert store.get(7) == Plant("Fern", "fern")
    assert len(store) == 1


def test_tag_given_later_is_409(client, auth, store):
    assert post(client, auth, {"id": 8, "name": "Fern"}).status_code == 200
    error_of(post(client, auth, {"id": 8, "name": "Fern", "tag": "fern"}), 409)
    assert store.get(8) == Plant("Fern", None)


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/xml",
        "application/jsonx",
        "application/merge-patch+json",
        "application/json; charset=latin-1",
        None,
    ],
)
def test_content_type_not_json_is_415(client, auth, store, content_type):
    headers = dict(auth)
    kwargs = {"content_type": content_type} if content_type else {}
    response = client.post("/plants", data='{"id": 1, "name": "Fern"}', headers=headers, **kwargs)
    error_of(response, 415)
    assert len(store) == 0


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        ("gzip", gzip.compress(b'{"id": 1, "name": "Fern"}')),
        ("br", b'{"id": 1, "name": "Fern"}'),
        ("identity, x", b"{}"),
    ],
    ids=["gzip", "br", "identity-then-x"],
)
def test_a_body_in_a_content_coding_is_415_naming_it(client, auth, store, coding, body):
    # Read as it came, a gzip body is no JSON and a br one would store what the client did not send.
    headers = {**auth, "Content-Type": "application/json", "Content-Encoding": coding}
    response = client.post("/plants", data=body, headers=headers)
    refused = coding.removeprefix("identity, ")
    assert f"'{refused}'" in error_of(response, 415)["message"]
    assert response.headers["Accept-Encoding"] == "identity"
    assert len(store) == 0


@pytest.mark.parametrize("codings", ["gzip, chunked", "x-custom, chunked"])
def test_a_body_in_a_transfer_coding_the_server_left_is_501_naming_it(client, auth, store, codings):
    # What a server that takes the chunks off but not the coding (gunicorn's gthread) hands the app.
    headers = {**auth, "Content-Type": "application/json", "Transfer-Encoding": codings}
    response = client.post("/plants", data=b'{"id": 1, "name": "Fern"}', headers=headers)
    assert f"'{codings.split(',')[0]}'" in error_of(response, 501)["message"]
    assert len(store) == 0


@pytest.mark.parametrize("coding", ["identity", "Identity", ""])
def test_a_body_with_the_identity_coding_is_read_as_it_is(client, auth, store, coding):
    headers = {**auth, "Content-Type": "application/json", "Content-Encoding": coding}
    response = client.post("/plants", data=b'{"id": 1, "name": "Fern"}', headers=headers)
    assert response.status_code == 200
    assert store.get(1) == Plant("Fern", None)


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON; Charset=UTF-8",
        "application/json;charset=utf8",
    ],
)
def test_json_content_type_with_or_without_charset_is_accepted(client, auth, content_type):
    response = post(client, auth, {"id": 1, "name": "Fern"}, content_type=content_type)
    assert response.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b'{"id": 1, "name": "Fern"',
        b'{"id": 1, "name": "Fern"} trailing',
        b'{"id": 1, "name": "Fern"}{}',
        b"\xff\xfe{}",
        b'{"id": 1, "name": "\xe9"}',
        b"\xef\xbb\xbf" + b'{"id": 1, "name": "Fern"}',
        b"[]",
        b'[{"id": 1, "name": "Fern"}]',
        b'"a string"',
        b"42",
        b"null",
        b"true",
    ],
    ids=[
        "empty",
        "truncated",
        "unclosed",
        "trailing-garbage",
        "two-values",
        "utf16-bom",
        "latin1",
        "utf8-bom",
        "array",
        "array-of-plants",
        "string",
        "number",
        "null",
        "true",
    ],
)
def test_body_that_is_not_one_json_object_is_400(client, auth, store, body):
    error_of(post(client, auth, body), 400)
    assert len(store) == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Fern"}, "id"),
        ({"id": True, "name": "Fern"}, "id"),
        ({"id": False, "name": "Fern"}, "id"),
        ({"id": 1.5, "name": "Fern"}, "id"),
        ('{"id": 1e-1, "name": "Fern"}', "id"),
        ('{"id": 9223372036854775808.0, "name": "Fern"}', "id"),
        ('{"id": -9.3e18, "name": "Fern"}', "id"),
        ('{"id": 1e999999999, "name": "Fern"}', "id"),
        ({"id": "1", "name": "Fern"}, "id"),
        ({"id": None, "name": "Fern"}, "id"),
        ({"id": [1], "name": "Fern"}, "id"),
        ({"id": INT64_MAX + 1, "name": "Fern"}, "id"),
        ({"id": INT64_MIN - 1, "name": "Fern"}, "id"),
        ({"id": 1}, "name"),
        ({"id": 1, "name": None}, "name"),
        ({"id": 1, "name": 5}, "name"),
        ({"id": 1, "name": ["Fern"]}, "name"),
        ({"id": 1, "name": {"text": "Fern"}}, "name"),
        ({"id": 1, "name": ""}, "name"),
        ({"id": 1, "name": "x" * 201}, "name"),
        ({"id": 1, "name": "Fern", "tag": None}, "tag"),
        ({"id": 1, "name": "Fern", "tag": 3}, "tag"),
        ({"id": 1, "name": "Fern", "tag": ["a"]}, "tag"),
        ({"id": 1, "name": "Fern", "tag": ""}, "tag"),
        ({"id": 1, "name": "Fern", "tag": "t" * 101}, "tag"),
        ({"id": 1, "name": "Fern", "tags": "fern"}, "tags"),
        ({"id": 1, "name": "Fern", "Name": "Fern"}, "Name"),
        ({"id": 1, "name": "Fern", "": 1}, ""),
    ],
)
def test_invalid_field_is_400_naming_the_field(client, auth, store, body, field):
    record = error_of(post(client, auth, body), 400)
    assert list(record["details"]) == [field]
    assert all(isinstance(m, str) and m for m in record["details"][field])
    if field:
        assert repr(field)[1:-1] in record["message"] or field in record["message"]
    assert len(store) == 0


def test_every_offending_field_is_named(client, auth):
    record = error_of(post(client, auth, {"id": "x", "tag": None, "tags": 1, "colour": "green"}), 400)
    assert set(record["details"]) == {"id", "name", "tag", "tags", "colour"}
    assert record["details"]["tags"] == ["Unknown field."]
    assert record["details"]["name"] == ["Missing data for required field."]


def test_body_larger_than_max_content_length_is_413(client, auth, store, app):
    limit = app.config["MAX_CONTENT_LENGTH"]
    assert limit == 64 * 1024
    body = json.dumps({"id": 1, "name": "Fern", "tag": "x" * limit})
    error_of(post(client, auth, body), 413)
    assert len(store) == 0


def test_body_at_the_limit_is_read(client, auth, app):
    limit = app.config["MAX_CONTENT_LENGTH"]
    body = b'{"id": 1, "name": "Fern"}'
    body = body + b" " * (limit - len(body))
    assert post(client, auth, body).status_code == 200


def test_store_full_is_507_but_replays_and_conflicts_still_answer(make_app, auth):
    app = make_app(PLANTS_MAX_PLANTS=2)
    client = app.test_client()
    for plant_id in (1, 2):
        assert post(client, auth, {"id": plant_id, "name": "Fern"}).status_code == 200
    error_of(post(client, auth, {"id": 3, "name": "Fern"}), 507)
    assert post(client, auth, {"id": 1, "name": "Fern"}).status_code == 200
    error_of(post(client, auth, {"id": 2, "name": "Cactus"}), 409)
    assert len(app.extensions["plants"].store) == 2
