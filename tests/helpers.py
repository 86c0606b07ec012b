"""Assertions shared by the tests."""

from __future__ import annotations

import json
from typing import Any

from app.schemas import ErrorSchema


def assert_error(status: int, headers: Any, body: bytes, expected: int) -> dict[str, Any]:
    """A JSON Error record with `error` equal to the status, and nothing else but `details`."""
    assert status == expected, body
    assert headers["Content-Type"] == "application/json"
    record = json.loads(body)
    assert ErrorSchema().load(record) == record  # the declared Error schema (raises if not)
    assert set(record) - {"details"} == {"error", "message"}
    assert record["error"] == expected
    assert isinstance(record["message"], str)
    assert record["message"]
    return record


def error_of(response: Any, expected: int) -> dict[str, Any]:
    """assert_error for a Flask test-client response."""
    return assert_error(response.status_code, response.headers, response.get_data(), expected)
