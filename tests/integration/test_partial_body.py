"""A write whose body is a part of a representation (`Content-Range`) is a 400 and writes nothing:
the service takes a body whole, so a part read as the whole would store what the client did not
mean (RFC 9110 section 14.5: a PUT with Content-Range to a resource without partial PUT is 400).
Through a real gunicorn, on the packaged worker with each store and on gunicorn's gthread."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.helpers import assert_error, call
from tests.servers import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
PART = {"Content-Range": "bytes 0-15/40"}


def _fresh_id() -> int:
    return uuid.uuid4().int % 10**12


def test_a_put_of_a_part_is_400_and_creates_nothing(either_worker):
    plant_id = _fresh_id()
    answer = call(
        either_worker.connection(), "PUT", f"/plants/{plant_id}", {"name": "Fern"}, {**AUTH, **PART}
    )
    refusal = assert_error(*answer, 400)
    assert "Content-Range" in refusal["message"]
    assert list(refusal["details"]) == ["Content-Range"]
    assert call(either_worker.connection(), "GET", f"/plants/{plant_id}", None, AUTH)[0] == 404


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_change_sent_as_a_part_is_400_and_changes_nothing(either_worker, method):
    plant_id = _fresh_id()
    created = call(either_worker.connection(), "POST", "/plants", {"id": plant_id, "name": "Fern"}, AUTH)
    assert created[0] == 200, created[2]
    answer = call(
        either_worker.connection(), method, f"/plants/{plant_id}", {"name": "Part"}, {**AUTH, **PART}
    )
    assert_error(*answer, 400)
    status, _, body = call(either_worker.connection(), "GET", f"/plants/{plant_id}", None, AUTH)
    assert (status, json.loads(body)) == (200, {"name": "Fern"})


def test_a_create_sent_as_a_part_is_400_and_creates_nothing(either_worker):
    plant_id = _fresh_id()
    plant = {"id": plant_id, "name": "Fern"}
    assert_error(*call(either_worker.connection(), "POST", "/plants", plant, {**AUTH, **PART}), 400)
    assert call(either_worker.connection(), "GET", f"/plants/{plant_id}", None, AUTH)[0] == 404
