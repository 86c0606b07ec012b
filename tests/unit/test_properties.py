"""Property tests (hypothesis): the schemas and the parser never fail other than by refusing,
valid Unicode round-trips exactly, and the store keeps its invariants under threads."""

from __future__ import annotations

import decimal
import functools
import json
import math
import threading
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from marshmallow import RAISE, Schema, ValidationError, fields, validate

from app import create_app
from app.http import strict_json
from app.plants.items import stored_plant
from app.schemas.records import (
    INT64_MAX,
    INT64_MIN,
    NAME_MAX_LENGTH,
    TAG_MAX_LENGTH,
    NewPlantSchema,
    PlantSchema,
    StoredPlantSchema,
    plant_record,
)
from app.store import CreateOutcome, MemoryPlantStore, Plant, StoreFullError

# Reproducible in CI; no deadline, since these machines are shared and noisy.
settings.register_profile("plants", derandomize=True, deadline=None, max_examples=300)
settings.load_profile("plants")

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=INT64_MIN - 10, max_value=INT64_MAX + 10)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
# Objects shaped like a NewPlant, with every field sometimes missing, mistyped or extra.
plant_like = st.fixed_dictionaries(
    {},
    optional={
        "id": st.integers(min_value=INT64_MIN - 2, max_value=INT64_MAX + 2) | json_scalars,
        "name": st.text(max_size=210) | json_scalars,
        "tag": st.text(max_size=110) | json_scalars,
        "tags": json_scalars,
    },
)
# A name or tag of white space alone is refused (app/schemas/records.py).
names = st.text(min_size=1, max_size=200).filter(lambda text: not text.isspace())
tags = st.text(min_size=1, max_size=100).filter(lambda text: not text.isspace())

new_plant_schema = NewPlantSchema()
plant_schema = PlantSchema()


def _integral_id(value) -> bool:
    """An id as the service reads it: an integral JSON number in the int64 range, read exactly
    from its JSON text (so 0.0 is 0, and a float is judged by the digits json.dumps writes)."""
    if type(value) is int:
        return INT64_MIN <= value <= INT64_MAX
    if type(value) is not float or not math.isfinite(value):
        return False
    number = decimal.Decimal(json.dumps(value))
    return number == number.to_integral_value() and INT64_MIN <= number <= INT64_MAX


def is_valid_new_plant(value) -> bool:
    return (
        isinstance(value, dict)
        and set(value) <= {"id", "name", "tag"}
        and _integral_id(value.get("id"))
        and isinstance(value.get("name"), str)
        and 1 <= len(value["name"]) <= 200
        and not value["name"].isspace()
        and (
            "tag" not in value
            or (
                isinstance(value["tag"], str) and 1 <= len(value["tag"]) <= 100 and not value["tag"].isspace()
            )
        )
    )


@given(json_values | plant_like)
def test_any_json_value_loads_or_is_refused_per_field(value):
    try:
        loaded = new_plant_schema.load(value)
    except ValidationError as error:
        assert not is_valid_new_plant(value)
        messages = error.normalized_messages()
        assert messages
        for field_name, field_messages in messages.items():
            assert isinstance(field_name, str)
            assert field_messages
            assert all(isinstance(message, str) and message for message in field_messages)
    else:
        assert is_valid_new_plant(value)
        assert loaded == value


def not_blank(value: str) -> None:
    if value.isspace():
        raise ValidationError("Must have a character other than white space.")


class PlainMarshmallowNewPlant(Schema):
    """The NewPlant schema in stock marshmallow fields: the oracle for app.schemas' shortcuts."""

    class Meta:
        unknown = RAISE

    name = fields.String(required=True, validate=[validate.Length(min=1, max=NAME_MAX_LENGTH), not_blank])
    tag = fields.String(validate=[validate.Length(min=1, max=TAG_MAX_LENGTH), not_blank])
    id = fields.Integer(required=True, strict=True, validate=validate.Range(min=INT64_MIN, max=INT64_MAX))


class PlainMarshmallowPlant(Schema):
    name = fields.String()
    tag = fields.String()


def load_outcome(load, value) -> tuple[str, object, object]:
    try:
        return ("loaded", load(value), None)
    except ValidationError as error:
        return ("refused", error.normalized_messages(), error.valid_data)


@given(json_values | plant_like)
def test_schemas_answer_exactly_as_stock_marshmallow(value):
    outcome = load_outcome(new_plant_schema.load, value)
    expected = load_outcome(PlainMarshmallowNewPlant().load, value)
    assert outcome == expected
    # marshmallow's own loop over the same fields (the path any other call takes).
    assert outcome == load_outcome(functools.partial(Schema.load, new_plant_schema), value)
    if expected[0] == "refused":
        assert list(outcome[1]) == list(expected[1])  # the same field order
    if isinstance(value, dict):
        assert plant_schema.dump(value) == PlainMarshmallowPlant().dump(value)


@given(json_values | plant_like)
def test_any_json_body_gets_200_409_or_a_json_400(value):
    app = create_app({"PLANTS_API_TOKENS": "t"})
    response = app.test_client().post(
        "/plants",
        data=json.dumps(value),
        content_type="application/json",
        headers={"Authorization": "Bearer t"},
    )
    if is_valid_new_plant(value):
        assert response.status_code == 200
        assert response.json == {key: value[key] for key in ("name", "tag") if key in value}
    else:
        assert response.status_code == 400
        assert response.json["error"] == 400


@given(
    plant_id=st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    name=names,
    tag=st.none() | tags,
    ensure_ascii=st.booleans(),
)
def test_valid_unicode_round_trips_exactly(plant_id, name, tag, ensure_ascii):
    document = {"id": plant_id, "name": name, **({"tag": tag} if tag is not None else {})}
    body = json.dumps(document, ensure_ascii=ensure_ascii).encode("utf-8")
    loaded = new_plant_schema.load(strict_json.loads(body))
    assert plant_schema.dump(loaded) == {"name": name, **({"tag": tag} if tag is not None else {})}


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(name=names, tag=st.none() | tags)
def test_valid_unicode_round_trips_through_http(name, tag):
    app = create_app({"PLANTS_API_TOKENS": "t"})
    document = {"id": 1, "name": name, **({"tag": tag} if tag is not None else {})}
    response = app.test_client().post("/plants", json=document, headers={"Authorization": "Bearer t"})
    assert response.status_code == 200
    assert json.loads(response.get_data()) == {"name": name, **({"tag": tag} if tag is not None else {})}
    assert app.extensions["plants"].store.get(1) == (name, tag)


operations = st.lists(
    st.tuples(st.integers(0, 5), st.sampled_from(["Fern", "Cactus"]), st.sampled_from([None, "green"])),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150)
@given(per_thread=st.lists(operations, min_size=2, max_size=4), capacity=st.integers(0, 6))
def test_store_invariants_under_concurrent_creates(per_thread, capacity):
    store = MemoryPlantStore(capacity)
    barrier = threading.Barrier(len(per_thread))
    results: list[list[tuple[tuple, object]]] = [[] for _ in per_thread]

    def run(index: int) -> None:
        barrier.wait()
        for op in per_thread[index]:
            try:
                results[index].append((op, store.create(*op)))
            except StoreFullError as error:
                results[index].append((op, error))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(per_thread))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()

    outcomes = [pair for thread_results in results for pair in thread_results]
    assert len(outcomes) == sum(len(ops) for ops in per_thread)
    created_ids = set()
    for plant_id in {op[0] for op, _ in outcomes}:
        mine = [(op, outcome) for op, outcome in outcomes if op[0] == plant_id]
        winners = [op for op, outcome in mine if outcome is CreateOutcome.CREATED]
        assert len(winners) <= 1  # one winner per id
        if not winners:
            assert all(isinstance(outcome, StoreFullError) for _, outcome in mine)
            assert store.get(plant_id) is None
            continue
        created_ids.add(plant_id)
        (winner,) = winners
        assert store.get(plant_id) == winner[1:]
        for op, outcome in mine:
            if outcome is CreateOutcome.IDENTICAL:
                assert op == winner  # replays are idempotent
            elif outcome is CreateOutcome.CONFLICT:
                assert op != winner  # conflicts are refused
            else:
                assert outcome is CreateOutcome.CREATED
    assert len(store) == len(created_ids) <= capacity
    if any(isinstance(outcome, StoreFullError) for _, outcome in outcomes):
        assert len(store) == capacity  # refused only when full


stored_plant_schema = StoredPlantSchema()


@given(plant_id=st.integers(min_value=INT64_MIN, max_value=INT64_MAX), name=names, tag=st.none() | tags)
def test_page_items_and_plants_are_what_the_schemas_dump(plant_id, name, tag):
    """The views build these records directly (a page has up to 1000); the schemas agree."""
    record = {"id": plant_id, "name": name} if tag is None else {"id": plant_id, "name": name, "tag": tag}
    assert stored_plant(plant_id, name, tag) == stored_plant_schema.dump(record)
    assert stored_plant_schema.load(stored_plant(plant_id, name, tag)) == record
    assert plant_record(Plant(name, tag)) == plant_schema.dump({k: v for k, v in record.items() if k != "id"})


json_members = st.dictionaries(st.text(max_size=5), json_scalars, max_size=4)
json_documents = st.recursive(
    json_members | json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


def _answer(decode: Callable[[bytes], object], body: bytes) -> object:
    """What `decode` makes of `body`: its value, or its refusal in words."""
    try:
        return ("value", decode(body))
    except strict_json.InvalidJSON as exc:
        return ("refused", str(exc))


@settings(max_examples=500)
@given(
    document=json_documents,
    spacing=st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")]),
    duplicate=st.booleans(),
    ensure_ascii=st.booleans(),
)
def test_the_fast_decoder_answers_as_the_strict_one(document, spacing, duplicate, ensure_ascii):
    """orjson decodes the common body: its answer (or refusal) is always the strict decoder's own."""
    body = json.dumps(document, separators=spacing, ensure_ascii=ensure_ascii).encode("utf-8")
    if duplicate and isinstance(document, dict) and document:
        key, value = next(iter(document.items()))
        # The same key again, spaced as a client might: the fast path must not let it through.
        body = body[:-1] + b", " + json.dumps(key).encode() + b" :" + json.dumps(value).encode() + b"}"
    assert _answer(strict_json.loads, body) == _answer(strict_json._strict_loads, body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"id": 1, "id": 2}',
        b'{"id": 1, "id" : 2}',
        b'{"id": 1,"name":"a:b", "id" : 2}',
        b'{"id": 1.0}',
        b'{"id": 1e2}',
        b'{"id": 18446744073709551616}',
        b'{"id": -9223372036854775809}',
        b'{"a": "\\ud800"}',
        b'{"a": NaN}',
        b'\xef\xbb\xbf{"a": 1}',
        b'{"a": {"b": 1, "b": 2}}',
    ],
)
def test_bodies_the_fast_decoder_leaves_to_the_strict_one(body):
    assert _answer(strict_json.loads, body) == _answer(strict_json._strict_loads, body)
