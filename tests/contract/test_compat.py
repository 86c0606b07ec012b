"""app/compat/: where a library's internals are not as a compat module expects, the service takes
the library's public path and answers exactly as before."""

from __future__ import annotations

import pytest
from marshmallow import Schema

import app.compat.marshmallow


@pytest.fixture
def store_settings():
    return {"PLANTS_STORE_URL": "memory://"}


def answers(client, auth):
    """Status and body of creates, changes and refusals that load and dump every record schema."""
    requests = [
        ("post", "/plants", {"id": 1, "name": "Boston fern", "tag": "fern"}),
        ("post", "/plants", {"id": 2, "name": "Snake plant"}),
        ("post", "/plants", {"id": "3", "name": 5, "tags": "x"}),
        ("post", "/plants", {"id": 2**63, "name": "", "tag": "t" * 101}),
        ("post", "/plants", {"id": True, "name": None}),
        ("put", "/plants/1", {"name": "Fern", "tag": "green"}),
        ("put", "/plants/1", {"id": 9, "name": "Fern"}),
        ("patch", "/plants/1", {"tag": None}),
        ("patch", "/plants/1", {"name": 7, "colour": "red"}),
        ("get", "/plants/1", None),
        ("get", "/plants?limit=10", None),
    ]
    found = []
    for method, path, body in requests:
        headers = {**auth, "Content-Type": "application/merge-patch+json"} if method == "patch" else auth
        response = getattr(client, method)(path, json=body, headers=headers)
        found.append((method, path, response.status_code, response.get_json()))
    return found


def test_the_checks_accept_the_installed_libraries():
    assert app.compat.marshmallow.marshmallow_fits()
    assert app.compat.marshmallow.FLAT


def test_the_marshmallow_check_sees_a_changed_method(monkeypatch):
    monkeypatch.setattr(Schema, "handle_error", lambda self, error, data: None)
    assert not app.compat.marshmallow.marshmallow_fits()


def test_records_answer_the_same_on_marshmallows_own_path(make_app, auth, monkeypatch):
    flat = answers(make_app().test_client(), auth)
    monkeypatch.setattr(app.compat.marshmallow, "FLAT", False)
    assert answers(make_app().test_client(), auth) == flat
    assert [status for _, _, status, _ in flat] == [200, 200, 400, 400, 400, 200, 400, 200, 400, 200, 200]
