"""Assertions shared by the tests."""

from __future__ import annotations

import http.client
import json
from typing import Any

from app.schemas import ErrorSchema
from app.store import Plant


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


def call(
    conn: http.client.HTTPConnection, method: str, path: str, body: Any = None, headers: dict | None = None
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request on `conn` (a dict body is sent as JSON), then close it: status, headers, body."""
    try:
        data = body if isinstance(body, (bytes, str, type(None))) else json.dumps(body)
        conn.request(method, path, body=data, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def walk_pages(store: Any, limit: int, tags: Any = None) -> list[tuple[int, Plant]]:
    """Every page of `store` from the first, each after the last id of the one before: the plants."""
    plants: list[tuple[int, Plant]] = []
    after = None
    while True:
        page = store.page(after, limit, tags)
        assert len(page.plants) <= limit
        plants += [(plant_id, Plant(name, tag)) for plant_id, name, tag in page.plants]
        if not page.more:
            return plants
        assert len(page.plants) == limit  # a page is short only when it is the last
        after = page.plants[-1][0]
