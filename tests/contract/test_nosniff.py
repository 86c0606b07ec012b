"""Every answer of the standalone service carries `X-Content-Type-Options: nosniff`, once: a browser
never reads a JSON answer (which can quote what a client sent) as a page (app/telemetry/request_ids.py)."""

from __future__ import annotations

import pytest

from tests.servers import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(params=["memory"])
def store_settings(request):
    return {}


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/plants", AUTH, 200),
        ("GET", "/plants/1", AUTH, 404),
        ("GET", "/plants", {}, 401),
        ("DELETE", "/plants", AUTH, 405),
        ("GET", "/nowhere", {}, 404),  # no route: the app's own JSON 404
        ("GET", "/healthz", {}, 200),
        ("OPTIONS", "/plants", {}, 204),
        ("GET", "/openapi.json", {}, 200),  # which sent it before, on its own
        ("GET", "/docs", {}, 200),
    ],
)
def test_every_answer_says_nosniff_once(client, method, path, headers, status):
    answer = client.open(path, method=method, headers=headers)
    assert answer.status_code == status
    assert answer.headers.getlist("X-Content-Type-Options") == ["nosniff"]


def test_a_refused_body_is_json_a_browser_will_not_sniff(client):
    answer = client.post(
        "/plants", data="<script>alert(1)</script>", headers={**AUTH, "Content-Type": "text/html"}
    )
    assert answer.status_code in (400, 415)
    assert answer.is_json
    assert answer.headers.getlist("X-Content-Type-Options") == ["nosniff"]
